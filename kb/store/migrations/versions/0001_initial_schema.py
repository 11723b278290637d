"""initial schema: signatures, occurrences, jobs, lessons, conditions, evidence, snapshots, audit log

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 00:18:41.356933
"""
from alembic import op
import sqlalchemy as sa
import hpcmem.kb.store.column_types
from sqlalchemy.dialects import postgresql

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None

# The audit log is append-only, enforced by the database itself so no client can rewrite history.
SQLITE_AUDIT_TRIGGERS = [
    "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END",
    "CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END",
]
PG_AUDIT_TRIGGERS = [
    "CREATE OR REPLACE FUNCTION hpcmem_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'audit_log is append-only'; END $$",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION hpcmem_audit_append_only()",
]


def _create_audit_triggers() -> None:
    dialect = op.get_bind().dialect.name
    for statement in SQLITE_AUDIT_TRIGGERS if dialect == "sqlite" else PG_AUDIT_TRIGGERS if dialect == "postgresql" else []:
        op.execute(statement)


def _drop_audit_triggers() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION IF EXISTS hpcmem_audit_append_only()")


def upgrade() -> None:
    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=False),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('object_type', sa.String(length=32), nullable=False),
    sa.Column('object_id', sa.String(length=64), nullable=False),
    sa.Column('before', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('after', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_log'))
    )
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audit_log_object_type_object_id'), ['object_type', 'object_id'], unique=False)

    op.create_table('env_snapshots',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('taken_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('modules', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('partitions', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_env_snapshots'))
    )
    with op.batch_alter_table('env_snapshots', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_env_snapshots_taken_at'), ['taken_at'], unique=False)

    op.create_table('job_records',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('user_name', sa.String(length=64), nullable=True),
    sa.Column('account', sa.String(length=64), nullable=True),
    sa.Column('job_name', sa.String(length=256), nullable=True),
    sa.Column('partition', sa.String(length=64), nullable=True),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('failed', sa.Boolean(), nullable=False),
    sa.Column('req_mem_mb', sa.Float(), nullable=True),
    sa.Column('req_cpus', sa.Integer(), nullable=True),
    sa.Column('req_gres', sa.String(length=256), nullable=True),
    sa.Column('req_time_s', sa.Integer(), nullable=True),
    sa.Column('constraints', sa.String(length=256), nullable=True),
    sa.Column('max_rss_mb', sa.Float(), nullable=True),
    sa.Column('elapsed_s', sa.Integer(), nullable=True),
    sa.Column('work_dir', sa.Text(), nullable=True),
    sa.Column('submit_line', sa.Text(), nullable=True),
    sa.Column('submit_time', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.Column('end_time', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_records')),
    sa.UniqueConstraint('cluster', 'job_id', name=op.f('uq_job_records_cluster_job_id'))
    )
    with op.batch_alter_table('job_records', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_records_cluster_user_name_job_name'), ['cluster', 'user_name', 'job_name'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_records_cluster_user_name_work_dir'), ['cluster', 'user_name', 'work_dir'], unique=False)

    op.create_table('signatures',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('category', sa.String(length=64), nullable=False),
    sa.Column('template', sa.Text(), nullable=False),
    sa.Column('first_seen', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('last_seen', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('embedding', sa.LargeBinary(), nullable=True),
    sa.Column('embedding_model', sa.String(length=128), nullable=True),
    sa.Column('embedding_hash', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_signatures')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_signatures_fingerprint'))
    )
    with op.batch_alter_table('signatures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_signatures_category'), ['category'], unique=False)

    op.create_table('store_meta',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_store_meta'))
    )
    op.create_table('lessons',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('signature_id', sa.Integer(), nullable=True),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('scope_name', sa.String(length=64), nullable=True),
    sa.Column('context', sa.Text(), nullable=True),
    sa.Column('cause', sa.Text(), nullable=False),
    sa.Column('fix', sa.Text(), nullable=False),
    sa.Column('actions', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('previous_status', sa.String(length=16), nullable=True),
    sa.Column('status_reason', sa.Text(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=False),
    sa.Column('confirmations', sa.Integer(), nullable=False),
    sa.Column('contradictions', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('author', sa.String(length=64), nullable=True),
    sa.Column('safety_flags', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('created_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('updated_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.Column('last_confirmed_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.Column('valid_until', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['signature_id'], ['signatures.id'], name=op.f('fk_lessons_signature_id_signatures'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lessons'))
    )
    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_lessons_fingerprint_status'), ['fingerprint', 'status'], unique=False)
        batch_op.create_index(batch_op.f('ix_lessons_signature_id'), ['signature_id'], unique=False)

    op.create_table('occurrences',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('signature_id', sa.Integer(), nullable=True),
    sa.Column('cluster', sa.String(length=64), nullable=False),
    sa.Column('job_id', sa.String(length=64), nullable=False),
    sa.Column('job_name', sa.String(length=256), nullable=True),
    sa.Column('user_name', sa.String(length=64), nullable=True),
    sa.Column('account', sa.String(length=64), nullable=True),
    sa.Column('partition', sa.String(length=64), nullable=True),
    sa.Column('qos', sa.String(length=64), nullable=True),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('exit_signal', sa.Integer(), nullable=True),
    sa.Column('failed_step', sa.String(length=32), nullable=True),
    sa.Column('req_mem_mb', sa.Float(), nullable=True),
    sa.Column('req_cpus', sa.Integer(), nullable=True),
    sa.Column('req_nodes', sa.Integer(), nullable=True),
    sa.Column('req_gres', sa.String(length=256), nullable=True),
    sa.Column('req_time_s', sa.Integer(), nullable=True),
    sa.Column('constraints', sa.String(length=256), nullable=True),
    sa.Column('max_rss_mb', sa.Float(), nullable=True),
    sa.Column('elapsed_s', sa.Integer(), nullable=True),
    sa.Column('nodes', sa.Text(), nullable=True),
    sa.Column('work_dir', sa.Text(), nullable=True),
    sa.Column('submit_line', sa.Text(), nullable=True),
    sa.Column('modules', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('log_excerpt', sa.Text(), nullable=True),
    sa.Column('log_path', sa.Text(), nullable=True),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('submit_time', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.Column('start_time', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.Column('end_time', hpcmem.kb.store.column_types.UTCDateTime(), nullable=True),
    sa.Column('observed_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['signature_id'], ['signatures.id'], name=op.f('fk_occurrences_signature_id_signatures'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_occurrences')),
    sa.UniqueConstraint('cluster', 'job_id', name=op.f('uq_occurrences_cluster_job_id'))
    )
    with op.batch_alter_table('occurrences', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_occurrences_end_time'), ['end_time'], unique=False)
        batch_op.create_index(batch_op.f('ix_occurrences_signature_id'), ['signature_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_occurrences_user_name_signature_id'), ['user_name', 'signature_id'], unique=False)

    op.create_table('lesson_conditions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.String(length=36), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('value', sa.String(length=256), nullable=True),
    sa.Column('op', sa.String(length=8), nullable=True),
    sa.ForeignKeyConstraint(['lesson_id'], ['lessons.id'], name=op.f('fk_lesson_conditions_lesson_id_lessons'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lesson_conditions'))
    )
    with op.batch_alter_table('lesson_conditions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_lesson_conditions_kind_name'), ['kind', 'name'], unique=False)
        batch_op.create_index(batch_op.f('ix_lesson_conditions_lesson_id'), ['lesson_id'], unique=False)

    op.create_table('lesson_evidence',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lesson_id', sa.String(length=36), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('occurrence_id', sa.Integer(), nullable=True),
    sa.Column('job_id', sa.String(length=64), nullable=True),
    sa.Column('actor', sa.String(length=64), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.Column('created_at', hpcmem.kb.store.column_types.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['lesson_id'], ['lessons.id'], name=op.f('fk_lesson_evidence_lesson_id_lessons'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['occurrence_id'], ['occurrences.id'], name=op.f('fk_lesson_evidence_occurrence_id_occurrences'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lesson_evidence'))
    )
    with op.batch_alter_table('lesson_evidence', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_lesson_evidence_lesson_id'), ['lesson_id'], unique=False)



    _create_audit_triggers()

def downgrade() -> None:
    _drop_audit_triggers()
    with op.batch_alter_table('lesson_evidence', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lesson_evidence_lesson_id'))

    op.drop_table('lesson_evidence')
    with op.batch_alter_table('lesson_conditions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lesson_conditions_lesson_id'))
        batch_op.drop_index(batch_op.f('ix_lesson_conditions_kind_name'))

    op.drop_table('lesson_conditions')
    with op.batch_alter_table('occurrences', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_occurrences_user_name_signature_id'))
        batch_op.drop_index(batch_op.f('ix_occurrences_signature_id'))
        batch_op.drop_index(batch_op.f('ix_occurrences_end_time'))

    op.drop_table('occurrences')
    with op.batch_alter_table('lessons', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lessons_signature_id'))
        batch_op.drop_index(batch_op.f('ix_lessons_fingerprint_status'))

    op.drop_table('lessons')
    op.drop_table('store_meta')
    with op.batch_alter_table('signatures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_signatures_category'))

    op.drop_table('signatures')
    with op.batch_alter_table('job_records', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_records_cluster_user_name_work_dir'))
        batch_op.drop_index(batch_op.f('ix_job_records_cluster_user_name_job_name'))

    op.drop_table('job_records')
    with op.batch_alter_table('env_snapshots', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_env_snapshots_taken_at'))

    op.drop_table('env_snapshots')
    with op.batch_alter_table('audit_log', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audit_log_object_type_object_id'))

    op.drop_table('audit_log')
