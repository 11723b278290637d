"""job_records.change_seq and the indexes incremental learning reads by

Revision ID: 0006
Revises: 0005
Create Date: 2027-01-12 10:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (no batch table copy); rows written before stay NULL, and a store
    # without a learn watermark is learned in full once.
    op.add_column('job_records', sa.Column('change_seq', sa.Integer(), nullable=True))
    op.create_index(op.f('ix_job_records_change_seq'), 'job_records', ['change_seq'], unique=False)
    op.create_index(op.f('ix_job_records_cluster_user_name_submit_time'), 'job_records',
                    ['cluster', 'user_name', 'submit_time'], unique=False)
    op.create_index(op.f('ix_lesson_evidence_occurrence_id'), 'lesson_evidence', ['occurrence_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_lesson_evidence_occurrence_id'), table_name='lesson_evidence')
    op.drop_index(op.f('ix_job_records_cluster_user_name_submit_time'), table_name='job_records')
    op.drop_index(op.f('ix_job_records_change_seq'), table_name='job_records')
    with op.batch_alter_table('job_records', schema=None) as batch_op:
        batch_op.drop_column('change_seq')
