"""drop the job_records indexes no query uses

Revision ID: 0007
Revises: 0006
Create Date: 2027-01-14 10:00:00
"""
from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # (cluster, user_name, job_name) and (cluster, user_name, work_dir) date from the first
    # schema. Learn reads a user's jobs by submit time (0006's index) and the recall-outcome
    # check now names the cluster, so it uses that index too; these two were only paid for,
    # at every job written (about a sixth of a 10^6-row sacct ingest's index updates).
    op.drop_index(op.f('ix_job_records_cluster_user_name_job_name'), table_name='job_records')
    op.drop_index(op.f('ix_job_records_cluster_user_name_work_dir'), table_name='job_records')


def downgrade() -> None:
    op.create_index(op.f('ix_job_records_cluster_user_name_work_dir'), 'job_records',
                    ['cluster', 'user_name', 'work_dir'], unique=False)
    op.create_index(op.f('ix_job_records_cluster_user_name_job_name'), 'job_records',
                    ['cluster', 'user_name', 'job_name'], unique=False)
