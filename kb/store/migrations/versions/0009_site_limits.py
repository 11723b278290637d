"""env_snapshots.site: the site's limits beyond partitions (nodes, QOS, associations, default accounts)

Revision ID: 0009
Revises: 0008
Create Date: 2027-02-01 10:00:00
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    # A plain ADD COLUMN: snapshots stored before have no site limits (NULL), which is how a
    # snapshot without them is stored from now on too, so their content hashes stay right.
    op.add_column('env_snapshots', sa.Column('site', _JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('env_snapshots', schema=None) as batch_op:
        batch_op.drop_column('site')
