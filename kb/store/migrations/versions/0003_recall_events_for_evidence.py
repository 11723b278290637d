"""recall events for evidence

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 01:45:36.196375
"""
from alembic import op
import sqlalchemy as sa
import hpcmem.kb.store.column_types


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('recall_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.String(length=36), nullable=False),
    sa.Column('store', sa.String(length=64), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('user_name', sa.String(length=64), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=True),
    sa.Column('job_id', sa.String(length=64), nullable=True),
    sa.Column('recalled_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_recall_events'))
    )
    with op.batch_alter_table('recall_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_recall_events_outcome_recalled_at'), ['outcome', 'recalled_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('recall_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_recall_events_outcome_recalled_at'))

    op.drop_table('recall_events')
