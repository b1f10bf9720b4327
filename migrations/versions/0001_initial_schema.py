"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 14:12:00.415365
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('teams',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('api_key_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('api_key_hash'),
    sa.UniqueConstraint('name')
    )
    op.create_table('traces',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=300), nullable=False),
    sa.Column('source_format', sa.String(length=50), nullable=True),
    sa.Column('framework', sa.String(length=50), nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('n_steps', sa.Integer(), nullable=False),
    sa.Column('n_samples', sa.BigInteger(), nullable=False),
    sa.Column('n_turns', sa.BigInteger(), nullable=False),
    sa.Column('n_tool_calls', sa.BigInteger(), nullable=False),
    sa.Column('n_rank_timings', sa.BigInteger(), nullable=False),
    sa.Column('n_gpu_events', sa.BigInteger(), nullable=False),
    sa.Column('max_response_len', sa.Integer(), nullable=True),
    sa.Column('tasks', sa.JSON(), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('team_id', 'content_hash', name='uq_trace_team_content')
    )
    with op.batch_alter_table('traces', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_traces_team_id'), ['team_id'], unique=False)

    op.create_table('gpu_events',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('event_idx', sa.Integer(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('stream', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('kind', sa.SmallInteger(), nullable=False),
    sa.Column('name_id', sa.Integer(), nullable=False),
    sa.Column('start_us', sa.Float(), nullable=False),
    sa.Column('dur_us', sa.Float(), nullable=False),
    sa.Column('launch_us', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'event_idx')
    )
    with op.batch_alter_table('gpu_events', schema=None) as batch_op:
        batch_op.create_index('ix_gpu_events_rank_start', ['trace_id', 'rank', 'start_us'], unique=False)

    op.create_table('gpu_kernel_names',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('name_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'name_id')
    )
    op.create_table('jobs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('team_id', sa.Integer(), nullable=False),
    sa.Column('trace_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=50), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('params_key', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('progress', sa.Float(), nullable=False),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('parts_total', sa.Integer(), nullable=False),
    sa.Column('parts_done', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['team_id'], ['teams.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_team_id'), ['team_id'], unique=False)
        batch_op.create_index('ix_jobs_trace_kind_key', ['trace_id', 'kind', 'params_key'], unique=False)

    op.create_table('rank_timings',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('phase', sa.String(length=40), nullable=False),
    sa.Column('dp_rank', sa.Integer(), nullable=True),
    sa.Column('tp_rank', sa.Integer(), nullable=True),
    sa.Column('seconds', sa.Float(), nullable=True),
    sa.Column('batch_size', sa.Integer(), nullable=True),
    sa.Column('validate', sa.Boolean(), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'step', 'rank', 'phase')
    )
    op.create_table('samples',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('group_idx', sa.Integer(), nullable=False),
    sa.Column('sample_idx', sa.Integer(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('dp_rank', sa.Integer(), nullable=True),
    sa.Column('tp_rank', sa.Integer(), nullable=True),
    sa.Column('task_id', sa.SmallInteger(), nullable=True),
    sa.Column('prompt_len', sa.Integer(), nullable=False),
    sa.Column('response_len', sa.Integer(), nullable=False),
    sa.Column('truncated', sa.Boolean(), nullable=True),
    sa.Column('validate', sa.Boolean(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=True),
    sa.Column('num_turns', sa.Integer(), nullable=True),
    sa.Column('num_tool_calls', sa.Integer(), nullable=True),
    sa.Column('latency_s', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'step', 'group_idx', 'sample_idx')
    )
    op.create_table('steps',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('validate', sa.Boolean(), nullable=False),
    sa.Column('n_groups', sa.Integer(), nullable=False),
    sa.Column('n_samples', sa.Integer(), nullable=False),
    sa.Column('prompt_tokens', sa.BigInteger(), nullable=False),
    sa.Column('response_tokens', sa.BigInteger(), nullable=False),
    sa.Column('t_gen', sa.Float(), nullable=True),
    sa.Column('t_reward', sa.Float(), nullable=True),
    sa.Column('t_old_log_prob', sa.Float(), nullable=True),
    sa.Column('t_ref', sa.Float(), nullable=True),
    sa.Column('t_adv', sa.Float(), nullable=True),
    sa.Column('t_update_actor', sa.Float(), nullable=True),
    sa.Column('t_step', sa.Float(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=False),
    sa.Column('summary', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'step')
    )
    op.create_table('tool_calls',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('group_idx', sa.Integer(), nullable=False),
    sa.Column('sample_idx', sa.Integer(), nullable=False),
    sa.Column('call_idx', sa.Integer(), nullable=False),
    sa.Column('turn', sa.Integer(), nullable=True),
    sa.Column('tool_name', sa.String(length=200), nullable=True),
    sa.Column('latency_s', sa.Float(), nullable=True),
    sa.Column('response_tokens', sa.Integer(), nullable=True),
    sa.Column('status', sa.String(length=40), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'step', 'group_idx', 'sample_idx', 'call_idx')
    )
    op.create_table('turns',
    sa.Column('trace_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('group_idx', sa.Integer(), nullable=False),
    sa.Column('sample_idx', sa.Integer(), nullable=False),
    sa.Column('turn', sa.Integer(), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=True),
    sa.Column('cached_tokens', sa.Integer(), nullable=True),
    sa.Column('completion_tokens', sa.Integer(), nullable=True),
    sa.Column('engine_latency_s', sa.Float(), nullable=True),
    sa.Column('tool_call_count', sa.Integer(), nullable=True),
    sa.Column('finish_reason', sa.String(length=40), nullable=True),
    sa.ForeignKeyConstraint(['trace_id'], ['traces.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('trace_id', 'step', 'group_idx', 'sample_idx', 'turn')
    )
    op.create_table('job_parts',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('idx', sa.Integer(), nullable=False),
    sa.Column('step_lo', sa.Integer(), nullable=False),
    sa.Column('step_hi', sa.Integer(), nullable=False),
    sa.Column('done', sa.Boolean(), nullable=False),
    sa.Column('result', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['jobs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('job_id', 'idx')
    )


def downgrade() -> None:
    op.drop_table('job_parts')
    op.drop_table('turns')
    op.drop_table('tool_calls')
    op.drop_table('steps')
    op.drop_table('samples')
    op.drop_table('rank_timings')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_jobs_trace_kind_key')
        batch_op.drop_index(batch_op.f('ix_jobs_team_id'))

    op.drop_table('jobs')
    op.drop_table('gpu_kernel_names')
    with op.batch_alter_table('gpu_events', schema=None) as batch_op:
        batch_op.drop_index('ix_gpu_events_rank_start')

    op.drop_table('gpu_events')
    with op.batch_alter_table('traces', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_traces_team_id'))

    op.drop_table('traces')
    op.drop_table('teams')
