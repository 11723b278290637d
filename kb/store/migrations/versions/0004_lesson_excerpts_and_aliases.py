"""lesson excerpts and aliases

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 14:10:00
"""
from alembic import op
import sqlalchemy as sa
import hpcmem.kb.store.column_types


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (no batch table copy): a short write lock while other processes open the store.
    op.add_column('lessons', sa.Column('excerpt', sa.Text(), nullable=True))
    op.create_table('lesson_aliases',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.String(length=36), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('template', sa.Text(), nullable=False),
    sa.Column('category', sa.String(length=64), nullable=False),
    sa.Column('excerpt', sa.Text(), nullable=True),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=True),
    sa.Column('created_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['lesson_id'], ['lessons.id'], name=op.f('fk_lesson_aliases_lesson_id_lessons'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lesson_aliases')),
    sa.UniqueConstraint('lesson_id', 'fingerprint', name=op.f('uq_lesson_aliases_lesson_id_fingerprint'))
    )
    op.create_index(op.f('ix_lesson_aliases_fingerprint'), 'lesson_aliases', ['fingerprint'], unique=False)
    op.create_index(op.f('ix_lesson_aliases_lesson_id'), 'lesson_aliases', ['lesson_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('lesson_aliases', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lesson_aliases_lesson_id'))
        batch_op.drop_index(batch_op.f('ix_lesson_aliases_fingerprint'))
    op.drop_table('lesson_aliases')
    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.drop_column('excerpt')
