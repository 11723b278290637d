"""occurrence indexes for the dashboard's trends

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10 10:00:00
"""
from alembic import op


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Covering indexes for kb/jobs/trends.py, so its aggregates over 10^6 occurrences never read
    # the table: failures per week scan (end_time, signature_id), which replaces the plain
    # end_time index (every query on end_time ranges still uses it); recurrence groups by
    # (signature, user) and reads end_time and account.
    op.create_index(op.f('ix_occurrences_end_time_signature_id'), 'occurrences',
                    ['end_time', 'signature_id'], unique=False)
    op.drop_index(op.f('ix_occurrences_end_time'), table_name='occurrences')
    op.create_index(op.f('ix_occurrences_signature_id_user_name_end_time_account'), 'occurrences',
                    ['signature_id', 'user_name', 'end_time', 'account'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_occurrences_signature_id_user_name_end_time_account'), table_name='occurrences')
    op.create_index(op.f('ix_occurrences_end_time'), 'occurrences', ['end_time'], unique=False)
    op.drop_index(op.f('ix_occurrences_end_time_signature_id'), table_name='occurrences')
