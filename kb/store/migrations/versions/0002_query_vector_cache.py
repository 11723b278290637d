"""query vector cache

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 00:19:29.489854
"""
from alembic import op
import sqlalchemy as sa
import hpcmem.kb.store.column_types


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('query_vectors',
    sa.Column('template_hash', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=128), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('template_hash', name=op.f('pk_query_vectors'))
    )


def downgrade() -> None:
    op.drop_table('query_vectors')
