"""lessons.job_context and occurrences.job_context: the job facts a lesson or a failure was born with

Revision ID: 0008
Revises: 0007
Create Date: 2027-01-20 10:00:00
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    # Plain ADD COLUMNs: rows written before have no context (NULL), which recall reads as
    # "unknown", never as a conflict.
    op.add_column('lessons', sa.Column('job_context', _JSON, nullable=True))
    op.add_column('occurrences', sa.Column('job_context', _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('occurrences', schema=None) as batch_op:
        batch_op.drop_column('job_context')
    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.drop_column('job_context')
