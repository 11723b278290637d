"""Tests for the sacct parser (hpcmem.ingest.sacct) and Slurm value parsers."""

from __future__ import annotations

import importlib.util
import stat
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hpcmem.ingest.sacct import (
    FIELDS_SINCE,
    SACCT_FIELDS,
    ParseIssue,
    SacctJob,
    SacctReader,
    live_fields,
    live_sacct_command,
    run_live_sacct,
    sacct_available,
    sacct_version,
)
from hpcmem.kb.slurm_units import (
    SlurmTimeParser,
    gres_in_tres,
    parse_duration,
    parse_exit_code,
    parse_job_id,
    parse_req_mem,
    parse_size_mb,
    parse_state,
    parse_timelimit,
    parse_tres,
    parse_user,
    tres_gpus,
)
from hpcmem.kb.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples" / "sacct"
UTC = timezone.utc
LEGACY_FIELDS = (
    "JobID,JobIDRaw,JobName,User,Account,Partition,State,ExitCode,Elapsed,Timelimit,"
    "ReqMem,MaxRSS,ReqCPUS,AllocCPUS,NNodes,NodeList,Submit,Start,End"
).split(",")


def read(name: str, **kwargs) -> tuple[dict[str, SacctJob], SacctReader]:
    with (SAMPLES / name).open(encoding="utf-8") as fh:
        reader = SacctReader(fh, tz=UTC, **kwargs)
        jobs = {job.job_id: job for job in reader}
    return jobs, reader


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# -- value parsers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("00:01:25", 85),
        ("05:30", 330),  # MM:SS
        ("1-00:00:00", 86400),
        ("2-03:14:55", 2 * 86400 + 3 * 3600 + 14 * 60 + 55),
        ("451-06:00:24", 451 * 86400 + 6 * 3600 + 24),
        ("00:00.002", 0.002),  # TotalCPU
        ("06:57.815", 417.815),
        ("3-00", 3 * 86400),  # D-HH
        ("1-12:30", 86400 + 12 * 3600 + 30 * 60),  # D-HH:MM
        ("90", 5400),  # bare minutes
        ("", None),
    ],
)
def test_parse_duration(text, seconds):
    if seconds is None:
        assert parse_duration(text) is None
    else:
        assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "12:ab:00", "-1:00:00", "00:00:nan", "1-"])
def test_parse_duration_rejects_junk(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("INVALID", None),
        ("", None),
        ("00:01:00", 60),
        ("1-00:00:00", 86400),
        ("2", 120),  # jobcomp / TimelimitRaw: minutes
    ],
)
def test_parse_timelimit(text, seconds):
    assert parse_timelimit(text) == seconds


@pytest.mark.parametrize(
    "text, bare, mb",
    [
        ("44064K", "B", 44064 / 1024),
        ("0", "B", 0.0),
        ("512", "B", 512 / 1024 / 1024),  # bare MaxRSS numbers are bytes
        ("2200M", "B", 2200.0),
        ("50M", "M", 50.0),
        ("1G", "M", 1024.0),
        ("312.50G", "M", 320000.0),
        ("2T", "M", 2 * 1024 * 1024),
        ("4000", "M", 4000.0),  # bare ReqMem numbers are MB
        ("", "M", None),
    ],
)
def test_parse_size_mb(text, bare, mb):
    result = parse_size_mb(text, bare_unit=bare)
    if mb is None:
        assert result is None
    else:
        assert result == pytest.approx(mb)


@pytest.mark.parametrize("text", ["12Q", "-5M", "inf", "nanG", "lots"])
def test_parse_size_mb_rejects_junk(text):
    with pytest.raises(ValueError):
        parse_size_mb(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4000Mc", (4000.0, "cpu")),
        ("16000Mn", (16000.0, "node")),
        ("191846Mn", (191846.0, "node")),
        ("1Gn", (1024.0, "node")),
        ("0n", (0.0, "node")),
        ("50M", (50.0, None)),
        ("312.50G", (320000.0, None)),
        ("", (None, None)),
    ],
)
def test_parse_req_mem(text, expected):
    assert parse_req_mem(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("0:125", (0, 125)), ("3:0", (3, 0)), ("0:0", (0, 0)), ("2", (2, None)), ("", (None, None))],
)
def test_parse_exit_code(text, expected):
    assert parse_exit_code(text) == expected


@pytest.mark.parametrize("text", ["one:0", "1:x", "-1:0"])
def test_parse_exit_code_rejects_junk(text):
    with pytest.raises(ValueError):
        parse_exit_code(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("CANCELLED by 1234", ("CANCELLED", 1234)),
        ("CANCELLED by 0", ("CANCELLED", 0)),
        ("OUT_OF_MEMORY", ("OUT_OF_MEMORY", None)),
        ("completed", ("COMPLETED", None)),
        ("", ("UNKNOWN", None)),
    ],
)
def test_parse_state(text, expected):
    assert parse_state(text) == expected


def test_parse_user():
    assert parse_user("alice(1001)") == ("alice", 1001)
    assert parse_user("alice") == ("alice", None)
    assert parse_user("") == (None, None)


@pytest.mark.parametrize(
    "text, gpus, gpu_type, gres",
    [
        ("billing=1,cpu=1,mem=50M,node=1", 0, None, None),
        ("billing=36,cpu=36,gres/gpu=2,mem=48000M,node=3", 2, None, "gpu=2"),
        ("cpu=4,gres/gpu:a100=1,mem=16G,node=1", 1, "a100", "gpu:a100=1"),
        ("billing=8,cpu=8,gres/gpu=2,gres/gpu:a100=2,mem=64G,node=1", 2, "a100", "gpu=2,gpu:a100=2"),
        ("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1,node=1", 3, "a100", "gpu:a100=2,gpu:v100=1"),
    ],
)
def test_tres_gpus(text, gpus, gpu_type, gres):
    tres = parse_tres(text)
    assert tres_gpus(tres) == (gpus, gpu_type)
    assert gres_in_tres(tres) == gres


def test_parse_tres_rejects_junk():
    with pytest.raises(ValueError):
        parse_tres("cpu=1,garbage")


@pytest.mark.parametrize(
    "text, job_id, step, base, task, tasks, het",
    [
        ("123", "123", None, 123, None, None, None),
        ("123.batch", "123", "batch", 123, None, None, None),
        ("123.interactive", "123", "interactive", 123, None, None, None),
        ("24220929_421.extern", "24220929_421", "extern", 24220929, 421, None, None),
        ("4103947_[9-11,13,16-20]", "4103947_[9-11,13,16-20]", None, 4103947, None, "9-11,13,16-20", None),
        ("1853+1.0", "1853+1", "0", 1853, None, None, 1),
    ],
)
def test_parse_job_id(text, job_id, step, base, task, tasks, het):
    parsed = parse_job_id(text)
    assert (parsed.job_id, parsed.step, parsed.base_id) == (job_id, step, base)
    assert (parsed.array_task_id, parsed.array_tasks, parsed.het_offset) == (task, tasks, het)


@pytest.mark.parametrize("text", ["abc", "123.", "12a", "JobID", "123_"])
def test_parse_job_id_rejects_junk(text):
    with pytest.raises(ValueError):
        parse_job_id(text)


def test_time_parser_utc_epoch_and_missing():
    parse = SlurmTimeParser(UTC)
    assert parse("2026-11-30T00:04:21") == utc("2026-11-30T00:04:21")
    assert parse("2026-11-30T00:04:21").tzinfo is UTC
    assert parse("1796018400") == utc("2026-11-30T06:00:00")  # SLURM_TIME_FORMAT=%s
    for missing in ("", "Unknown", "None", "N/A"):
        assert parse(missing) is None
    with pytest.raises(ValueError):
        parse("Tue 14:05")


def test_time_parser_converts_a_zone_with_dst():
    parse = SlurmTimeParser(ZoneInfo("Europe/Berlin"))
    assert parse("2026-11-30T07:00:00") == utc("2026-11-30T06:00:00")  # CET, +1
    assert parse("2026-07-01T12:00:00") == utc("2026-07-01T10:00:00")  # CEST, +2
    assert parse("2026-11-30T07:59:59") == utc("2026-11-30T06:59:59")  # cached hour
    fixed = SlurmTimeParser(timezone(timedelta(hours=-5, minutes=-30)))
    assert fixed("2026-11-30T00:00:00") == utc("2026-11-30T05:30:00")


def test_time_parser_defaults_to_the_system_zone():
    naive = datetime(2026, 11, 30, 12, 0, 0)
    expected = naive.astimezone().astimezone(UTC)
    assert SlurmTimeParser()("2026-11-30T12:00:00") == expected


# -- the real 22.05 cluster ------------------------------------------------------------


@pytest.fixture(scope="module")
def real():
    jobs, reader = read("real-22.05-parsable2.psv")
    assert reader.issue_count == 0
    return jobs


def test_real_counts():
    jobs, reader = read("real-22.05-parsable2.psv")
    assert list(jobs) == ["1", "2", "3", "4", "5", "6", "7"]
    assert (reader.rows_read, reader.jobs, reader.steps) == (14, 7, 7)
    assert reader.fields[0] == "JobID" and reader.fields[-1] == "SubmitLine"


def test_real_job1_timeout(real):
    job = real["1"]
    assert (job.state, job.raw_state, job.exit_code, job.exit_signal) == ("TIMEOUT", "TIMEOUT", 0, 0)
    assert (job.elapsed_s, job.timelimit_s, job.timelimit_raw) == (85, 60, "00:01:00")
    assert job.partition == "debug" and job.req_mem_mb == 50.0
    assert job.failed_step == "batch" and job.failed_step_state == "CANCELLED"
    assert job.steps[0].exit_signal == 15
    assert job.max_rss_mb == pytest.approx(400 / 1024) and job.max_rss_step == "batch"
    assert job.is_failure and job.failure_state == "TIMEOUT"
    assert job.start == utc("2026-11-30T00:04:21") and job.end == utc("2026-11-30T00:05:46")


def test_real_job2_completed(real):
    job = real["2"]
    assert job.state == "COMPLETED" and not job.is_failure and job.failure_state is None
    assert job.failed_step is None
    assert (job.name, job.user, job.account, job.nodelist) == ("ok", "alice", "research", "localhost")
    assert job.workdir == "/home/alice/jobs" and job.submit_line == "sbatch --parsable ok.sh"
    assert job.max_rss_mb == pytest.approx(452 / 1024)


def test_real_job3_failed(real):
    job = real["3"]
    assert (job.state, job.exit_code, job.exit_signal) == ("FAILED", 3, 0)
    assert (job.derived_exit_code, job.derived_exit_signal) == (0, 0)
    assert (job.failed_step, job.failed_step_state) == ("batch", "FAILED")
    assert job.max_rss_mb == 0.0


def test_real_job4_out_of_memory(real):
    job = real["4"]
    assert (job.state, job.exit_code, job.exit_signal) == ("OUT_OF_MEMORY", 0, 125)
    assert job.req_mem_mb == 50.0 and job.req_mem_per is None and job.req_mem_total_mb == 50.0
    assert job.max_rss_mb == pytest.approx(43.03, abs=0.01) and job.max_rss_step == "batch"
    assert (job.failed_step, job.failed_step_state) == ("batch", "OUT_OF_MEMORY")
    assert job.failure_state == "OUT_OF_MEMORY"


def test_real_job5_step_failure_hidden_by_completed_script(real):
    job = real["5"]
    assert (job.state, job.exit_code) == ("COMPLETED", 0)
    assert (job.derived_exit_code, job.derived_exit_signal) == (3, 0)
    assert (job.failed_step, job.failed_step_state) == ("0", "FAILED")
    assert job.is_failure and job.failure_state == "FAILED"
    assert [(s.step_id, s.name, s.state, s.exit_code) for s in job.steps] == [
        ("batch", "batch", "COMPLETED", 0),
        ("0", "python3", "FAILED", 3),
    ]


def test_real_job6_cancelled_while_pending(real):
    job = real["6"]
    assert (job.state, job.raw_state, job.cancelled_by_uid) == ("CANCELLED", "CANCELLED by 0", 0)
    assert job.start is None and job.nodelist is None and job.steps == ()
    assert job.submit == utc("2026-11-30T00:04:21") and job.end == utc("2026-11-30T00:04:26")
    assert job.timelimit_s == 300 and job.is_failure


def test_real_job7_timeout_with_empty_timelimit(real):
    job = real["7"]
    assert job.state == "TIMEOUT" and job.elapsed_s == 20
    assert job.timelimit_s is None and job.timelimit_raw is None
    assert job.submit_line.endswith("--wrap=sleep 600")


def test_real_allocations_only():
    jobs, reader = read("real-22.05-allocations.psv")
    assert reader.steps == 0 and len(jobs) == 7
    assert jobs["4"].max_rss_mb is None and jobs["4"].failed_step is None
    # Without steps, DerivedExitCode alone still exposes job 5's failure.
    assert jobs["5"].failure_state == "FAILED"


def test_real_extra_fields():
    jobs, _ = read("real-22.05-extra.psv")
    assert jobs["6"].reason == "PartitionTimeLimit" and jobs["2"].reason is None
    assert jobs["2"].total_cpu_s == pytest.approx(0.110)
    assert jobs["2"].flags == "SchedBackfill,StartRecieved"
    assert jobs["2"].req_tres == "billing=1,cpu=1,mem=100M,node=1"
    assert jobs["2"].gpus == 0 and jobs["2"].req_gres is None
    assert jobs["6"].alloc_tres is None
    assert jobs["4"].max_rss_mb == pytest.approx(44064 / 1024)


def test_real_without_cgroups():
    jobs, _ = read("real-22.05-nocgroup-parsable2.psv")
    oom = jobs["4"]
    assert (oom.state, oom.exit_code, oom.exit_signal) == ("FAILED", 0, 9)
    assert (oom.failed_step, oom.failed_step_state) == ("batch", "CANCELLED")
    assert oom.max_rss_mb == pytest.approx(52104 / 1024)
    assert jobs["3"].max_rss_mb is None  # empty MaxRSS on the step
    assert (jobs["7"].state, jobs["7"].failed_step_state) == ("TIMEOUT", "FAILED")


def test_real_jobcomp_backed_output():
    jobs, _ = read("real-22.05-jobcomp-parsable2.psv")
    assert list(jobs) == ["2", "3", "6", "4", "5", "7", "1"]
    assert (jobs["2"].user, jobs["2"].uid) == ("alice", 1001)
    assert jobs["2"].timelimit_s == 120 and jobs["1"].timelimit_s == 60
    assert jobs["6"].nodelist is None and jobs["2"].account is None
    assert jobs["4"].state == "OUT_OF_MEMORY"


# -- layouts -----------------------------------------------------------------------------


def _sample_lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text(encoding="utf-8").splitlines(keepends=True)


def _as_dicts(jobs) -> list[dict]:
    return [{slot: getattr(job, slot) for slot in SacctJob.__slots__ if slot != "line_no"} for job in jobs]


def test_headerless_with_fields_matches_header():
    lines = _sample_lines("real-22.05-parsable2.psv")
    fields = lines[0].strip().split("|")
    with_header = list(SacctReader(lines, tz=UTC))
    headerless = SacctReader(lines[1:], fields, tz=UTC)
    assert _as_dicts(headerless) == _as_dicts(with_header)
    assert [job.line_no for job in SacctReader(lines[1:], fields, tz=UTC)][:2] == [1, 3]


def test_fields_given_and_header_present_skips_the_header():
    lines = _sample_lines("real-22.05-parsable2.psv")
    fields = [name.lower() for name in lines[0].strip().split("|")]
    reader = SacctReader(lines, fields, tz=UTC)
    assert [job.job_id for job in reader] == ["1", "2", "3", "4", "5", "6", "7"]
    assert reader.rows_read == 14 and reader.issue_count == 0


def test_field_order_case_and_unknown_columns_do_not_matter():
    lines = [line.rstrip("\n").split("|") for line in _sample_lines("real-22.05-parsable2.psv")]
    order = list(reversed(range(len(lines[0]))))
    shuffled = []
    for number, cells in enumerate(lines):
        cells = [cells[i] for i in order] + ["Whatever" if number == 0 else "x"]
        if number == 0:
            cells = [cell.upper() for cell in cells]
        shuffled.append("|".join(cells) + "\n")
    assert _as_dicts(SacctReader(shuffled, tz=UTC)) == _as_dicts(
        SacctReader(_sample_lines("real-22.05-parsable2.psv"), tz=UTC)
    )


def test_crlf_lines():
    lines = [line.replace("\n", "\r\n") for line in _sample_lines("real-22.05-parsable2.psv")]
    jobs = {job.job_id: job for job in SacctReader(lines, tz=UTC)}
    assert jobs["7"].submit_line.endswith("sleep 600")
    assert jobs["4"].max_rss_mb == pytest.approx(44064 / 1024)


def test_parsable_trailing_delimiter():
    jobs, reader = read("parsable-trailing-delimiter.psv")
    assert reader.issue_count == 0 and reader.fields[-1] == "Elapsed"
    assert list(jobs) == ["52210+0", "52210+1", "52230_1", "52230_2", "52230_[3-4]"]
    het = jobs["52210+1"]
    assert (het.het_job_id, het.het_offset, het.partition) == (52210, 1, "gpu")
    assert (het.state, het.raw_state, het.failed_step) == ("OUT_OF_MEMORY", "FAILED", "0")
    assert het.max_rss_mb == pytest.approx(31457012 / 1024) and het.max_rss_step == "0"
    assert [s.step_id for s in jobs["52210+0"].steps] == ["batch", "extern", "0"]
    assert jobs["52210+0"].state == "COMPLETED" and jobs["52210+0"].alloc_cpus == 4
    assert (jobs["52230_2"].array_job_id, jobs["52230_2"].array_task_id) == (52230, 2)
    assert jobs["52230_2"].failure_state == "TIMEOUT"
    pending = jobs["52230_[3-4]"]
    assert (pending.array_job_id, pending.array_task_id, pending.state) == (52230, None, "PENDING")


def test_trailing_delimiter_detected_per_line_without_header():
    lines = _sample_lines("parsable-trailing-delimiter.psv")
    fields = lines[0].rstrip("|\n").split("|")
    reader = SacctReader(lines[1:], fields, tz=UTC)
    assert len(list(reader)) == 5 and reader.issue_count == 0


def test_legacy_headerless_reqmem_suffixes():
    jobs, reader = read("legacy-20.11-noheader.psv", fields=LEGACY_FIELDS)
    assert reader.issue_count == 0 and reader.rows_read == 32 and len(jobs) == 11
    bwa = jobs["31207"]
    assert (bwa.req_mem_mb, bwa.req_mem_per, bwa.req_mem_total_mb) == (4000.0, "cpu", 16000.0)
    oom = jobs["31210"]
    assert oom.state == "OUT_OF_MEMORY" and oom.max_rss_mb == pytest.approx(16380588 / 1024)
    assert oom.max_rss_mb > oom.req_mem_total_mb * 0.99  # 8 CPUs x 2000M
    md = jobs["31220"]
    assert (md.req_mem_per, md.req_mem_total_mb, md.nnodes) == ("node", 96000.0, 2)
    assert (md.elapsed_s, md.timelimit_s, md.failed_step) == (86412, 86400, "0")
    assert jobs["31221"].req_mem_mb == 0.0 and jobs["31221"].req_mem_per == "node"
    assert jobs["31225_1"].job_id_raw == "31226" and jobs["31225_2"].job_id_raw == "31225"
    assert jobs["31225_2"].failure_state == "FAILED"
    assert jobs["31230"].cancelled_by_uid == 1003
    pending = jobs["31231"]
    assert (pending.cancelled_by_uid, pending.alloc_cpus, pending.start) == (0, 0, None)
    assert jobs["31240"].state == "NODE_FAIL" and jobs["31240"].exit_code == 1
    running = jobs["31244"]
    assert (running.state, running.end, running.timelimit_raw) == ("RUNNING", None, "UNLIMITED")
    assert running.elapsed_s == 2 * 86400 + 4 * 3600 + 10 * 60 + 11 and not running.is_failure


def test_epoch_times_and_raw_timelimit():
    jobs, reader = read("epoch-times-allocations.psv")
    assert reader.issue_count == 0 and list(jobs) == [str(n) for n in range(52140, 52146)]
    train = jobs["52140"]
    assert train.start == utc("2026-11-30T06:00:00") and train.end == utc("2026-11-30T08:00:11")
    assert (train.timelimit_s, train.gpus, train.gpu_type, train.cluster) == (43200, 2, "a100", "lab")
    assert jobs["52142"].end is None and jobs["52142"].state == "RUNNING"
    assert jobs["52141"].failure_state == "OUT_OF_MEMORY"
    assert jobs["52144"].start is None and jobs["52144"].alloc_tres is None
    assert jobs["52145"].gpus == 4 and jobs["52145"].timelimit_raw == "UNLIMITED"
    assert jobs["52145"].timelimit_s is None


# -- the lab week --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab():
    jobs, reader = read("lab-week.psv")
    return jobs, reader


def test_lab_week_totals(lab):
    jobs, reader = lab
    assert reader.issue_count == 0
    assert (reader.rows_read, reader.jobs) == (408, 103)
    assert reader.jobs + reader.steps == reader.rows_read
    assert {job.user for job in jobs.values()} == {"alice", "bob", "carol", "dmitri", "hpcagent"}
    assert {job.partition for job in jobs.values()} == {"cpu", "gpu", "gpu_test", "debug", "bigmem"}
    states = Counter(job.state for job in jobs.values())
    for state in ("OUT_OF_MEMORY", "TIMEOUT", "FAILED", "CANCELLED", "NODE_FAIL", "PREEMPTED"):
        assert states[state] >= 1
    assert all(job.start.tzinfo is UTC for job in jobs.values() if job.start)


def test_lab_oom_then_resubmitted_with_more_memory(lab):
    jobs, _ = lab
    oom, fixed = jobs["52004"], jobs["52005"]
    assert oom.state == "OUT_OF_MEMORY" and oom.req_mem_mb == 8192
    assert oom.max_rss_mb == pytest.approx(8165656 / 1024) and oom.max_rss_step == "batch"
    assert fixed.state == "COMPLETED" and fixed.req_mem_mb == 32768
    assert (fixed.user, fixed.name, fixed.workdir) == (oom.user, oom.name, oom.workdir)
    assert timedelta(minutes=5) < fixed.submit - oom.end < timedelta(minutes=10)
    assert fixed.max_rss_mb > oom.req_mem_mb


def test_lab_oom_in_srun_step_promotes_the_job_state(lab):
    job = lab[0]["52008"]
    assert (job.raw_state, job.state, job.exit_code) == ("FAILED", "OUT_OF_MEMORY", 1)
    assert (job.failed_step, job.failed_step_state, job.max_rss_step) == ("0", "OUT_OF_MEMORY", "0")
    assert (job.gpus, job.gpu_type, job.req_gres) == (1, "a100", "gpu=1,gpu:a100=1")
    assert lab[0]["52010"].req_mem_mb == 65536 and lab[0]["52010"].state == "COMPLETED"


def test_lab_timeout_then_longer_time(lab):
    jobs, _ = lab
    job, fixed = jobs["52021"], jobs["52023"]
    assert (job.state, job.timelimit_s, job.elapsed_s) == ("TIMEOUT", 4 * 3600, 4 * 3600 + 32)
    assert (job.failed_step, job.failed_step_state) == ("0", "CANCELLED")  # srun step over batch
    assert (job.nnodes, job.nodelist, job.constraints) == (2, "cpu-[11-12]", "avx512")
    assert (fixed.state, fixed.timelimit_s, fixed.workdir) == ("COMPLETED", 12 * 3600, job.workdir)


def test_lab_partition_and_gres_changes(lab):
    jobs, _ = lab
    assert (jobs["52026"].partition, jobs["52026"].state) == ("gpu_test", "TIMEOUT")
    assert (jobs["52027"].partition, jobs["52027"].state) == ("gpu", "COMPLETED")
    assert jobs["52026"].name == jobs["52027"].name == "agent-eval_checkpoint"
    assert (jobs["52038"].gpu_type, jobs["52038"].state, jobs["52038"].failed_step) == ("v100", "FAILED", "0")
    assert (jobs["52039"].gpu_type, jobs["52039"].state) == ("a100", "COMPLETED")


def test_lab_completed_job_with_failed_step(lab):
    job = lab[0]["52042"]
    assert (job.state, job.derived_exit_code, job.failed_step) == ("COMPLETED", 2, "0")
    assert job.is_failure and job.failure_state == "FAILED"
    assert [s.state for s in job.steps] == ["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"]


def test_lab_cancellations_node_fail_preemption(lab):
    jobs, _ = lab
    assert (jobs["52053"].state, jobs["52053"].cancelled_by_uid) == ("CANCELLED", 1001)
    root = jobs["52054"]
    assert (root.cancelled_by_uid, root.reason, root.steps, root.start) == (0, "PartitionTimeLimit", (), None)
    assert jobs["52056"].failure_state == "NODE_FAIL"
    assert (jobs["52066"].state, jobs["52066"].qos) == ("PREEMPTED", "scavenger")
    assert jobs["52088"].exit_code == 127 and jobs["52088"].failed_step == "batch"


def test_lab_array(lab):
    jobs, _ = lab
    tasks = [job for job in jobs.values() if job.array_job_id == 52067]
    assert [job.job_id for job in tasks] == [f"52067_{n}" for n in range(1, 9)] + ["52067_[9-12]"]
    assert jobs["52067_1"].job_id_raw == "52068" and jobs["52067_1"].array_task_id == 1
    assert [job.array_task_id for job in tasks if job.state == "OUT_OF_MEMORY"] == [7]
    pending = jobs["52067_[9-12]"]
    assert (pending.job_id_raw, pending.state, pending.array_task_id) == ("52067", "PENDING", None)


def test_lab_het_job_components_are_separate_records(lab):
    jobs, _ = lab
    cpu, gpu = jobs["52077+0"], jobs["52077+1"]
    assert (cpu.het_job_id, cpu.het_offset, gpu.het_offset) == (52077, 0, 1)
    assert (cpu.partition, gpu.partition, gpu.gpus, gpu.job_id_raw) == ("cpu", "gpu", 2, "52078")
    assert [s.step_id for s in gpu.steps] == ["extern", "0"]
    assert cpu.submit_line == gpu.submit_line and " : " in cpu.submit_line


def test_lab_limits_running_and_pending(lab):
    jobs, _ = lab
    long = jobs["52003"]
    assert (long.timelimit_s, long.timelimit_raw) == (None, "UNLIMITED")
    assert long.elapsed_s == 2 * 86400 + 3 * 3600 + 14 * 60 + 55 and long.req_mem_mb == 524288
    assert (jobs["52101"].state, jobs["52101"].end) == ("RUNNING", None)
    assert not jobs["52101"].is_failure
    pending = jobs["52103"]
    assert (pending.timelimit_raw, pending.timelimit_s, pending.start) == ("Partition_Limit", None, None)
    assert jobs["52005"].stdout == "/home/bob/align/%x-%j.out"



def test_cancelled_step_in_a_completed_job_is_not_a_failure():
    lines = [
        "JobID|State|ExitCode|DerivedExitCode\n",
        "900|COMPLETED|0:0|0:0\n",
        "900.extern|COMPLETED|0:0|\n",
        "900.interactive|CANCELLED|0:15|\n",
        "901|COMPLETED|0:0|1:0\n",
        "901.interactive|FAILED|1:0|\n",
        "902|CANCELLED by 1002|0:0|0:0\n",
        "902.batch|CANCELLED|0:15|\n",
    ]
    jobs = {job.job_id: job for job in SacctReader(lines)}
    assert jobs["900"].failed_step is None and not jobs["900"].is_failure
    assert (jobs["901"].failed_step, jobs["901"].failure_state) == ("interactive", "FAILED")
    assert (jobs["902"].failed_step, jobs["902"].cancelled_by_uid) == ("batch", 1002)

# -- damaged input ---------------------------------------------------------------------


def test_malformed_lines_are_reported_with_line_numbers():
    seen: list[ParseIssue] = []
    jobs, reader = read("malformed.psv", on_issue=seen.append)
    assert list(jobs) == ["60001", "60002", "60004", "60005", "60006"]
    assert seen == reader.issues and reader.issue_count == 8
    found = sorted((issue.line_no, issue.reason.split(" value")[0]) for issue in seen)
    assert found == [
        (6, "expected 9 fields, found 6"),
        (7, "step rows of job 60003 without its allocation row"),
        (8, "bad Elapsed"),
        (8, "bad ReqMem"),
        (9, "bad MaxRSS"),
        (11, "expected 9 fields, found 1"),
        (13, "unrecognised JobID 'not-a-job'"),
        (14, "bad ExitCode"),
    ]
    assert seen[2].excerpt.startswith("sacct: error:")
    assert reader.rows_read == 14  # data rows, the repeated header excluded
    assert (reader.jobs, reader.steps, reader.rows_skipped) == (5, 5, 4)  # lines 6, 7, 11, 13


def test_malformed_jobs_keep_their_good_values():
    jobs, _ = read("malformed.psv")
    assert jobs["60002"].submit_line == "sbatch --wrap=sort data.txt | uniq -c"
    assert jobs["60002"].max_rss_mb == 2.0
    bad = jobs["60004"]
    assert (bad.elapsed_s, bad.req_mem_mb, bad.max_rss_mb) == (None, None, None)
    assert (bad.state, bad.exit_code, bad.failed_step) == ("FAILED", 2, "batch")
    assert (jobs["60005"].exit_code, jobs["60005"].state) == (None, "FAILED")
    assert jobs["60006"].max_rss_mb == 7168.0


def test_no_header_is_an_input_error():
    lines = _sample_lines("legacy-20.11-noheader.psv")
    with pytest.raises(InputError, match="no header"):
        list(SacctReader(lines))


def test_no_jobid_column_is_an_input_error():
    with pytest.raises(InputError, match="JobID"):
        list(SacctReader(["State|ExitCode\n", "COMPLETED|0:0\n"], fields=["State", "ExitCode"]))


def test_empty_input_gives_no_jobs():
    reader = SacctReader(iter(["", "\n"]))
    assert list(reader) == [] and reader.rows_read == 0


def test_issues_kept_are_capped_but_counted():
    lines = ["JobID|State\n"] + ["x|y|z\n"] * 1200
    reader = SacctReader(lines)
    assert list(reader) == []
    assert reader.issue_count == 1200 and len(reader.issues) == 1000
    assert reader.rows_skipped == reader.rows_read == 1200


def test_every_orphan_step_row_is_skipped_but_reported_once():
    lines = ["JobID|State\n", "7.batch|FAILED\n", "7.0|FAILED\n", "8|COMPLETED\n"]
    reader = SacctReader(lines)
    assert [job.job_id for job in reader] == ["8"]
    assert (reader.rows_skipped, reader.issue_count, reader.issues[0].line_no) == (2, 1, 2)


# -- streaming ------------------------------------------------------------------------


def test_first_job_is_yielded_before_the_input_is_exhausted():
    consumed = 0

    def lines():
        nonlocal consumed
        with (SAMPLES / "lab-week.psv").open(encoding="utf-8") as fh:
            for line in fh:
                consumed += 1
                yield line

    jobs = iter(SacctReader(lines(), tz=UTC))
    first = next(jobs)
    assert first.job_id == "52001"
    # header + 52001's allocation and steps + the next allocation row, nothing more
    assert consumed == 2 + len(first.steps) + 1
    second = next(jobs)
    assert second.job_id == "52002" and consumed < 20


def test_generated_rows_parse_cleanly(monkeypatch):
    spec = importlib.util.spec_from_file_location("gen_sacct", REPO / "bench" / "gen_sacct.py")
    gen = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gen_sacct", gen)  # dataclasses look their module up
    spec.loader.exec_module(gen)
    lines = list(gen.generate(3000, seed=11))
    assert lines[0] == "|".join(SACCT_FIELDS)
    reader = SacctReader(iter(lines), tz=UTC)
    jobs = list(reader)
    assert reader.issue_count == 0 and reader.rows_read == len(lines) - 1
    assert reader.jobs + reader.steps == reader.rows_read
    assert 0 < sum(job.is_failure for job in jobs) < len(jobs)

    # The short profile: the real 22.05 dump's field list, no extern steps.
    short = list(gen.generate(3000, seed=11, profile="short"))
    assert short[0] == "|".join(gen.SHORT_FIELDS)
    reader = SacctReader(iter(short), tz=UTC)
    short_jobs = list(reader)
    assert reader.issue_count == 0 and reader.rows_read == len(short) - 1
    assert [job.job_id for job in short_jobs[: len(jobs)]] == [job.job_id for job in jobs]  # the same jobs
    assert not any(step.step_id == "extern" for job in short_jobs for step in job.steps)
    assert 0.3 < len(short_jobs) / reader.rows_read < 0.4  # a third of the rows are allocations


# -- running sacct ---------------------------------------------------------------------


def test_live_fields_follow_the_slurm_version():
    assert "StdOut" not in live_fields((22, 5, 8)) and "StdErr" not in live_fields(None)
    assert live_fields((23, 11, 1)) == SACCT_FIELDS
    assert set(SACCT_FIELDS) - set(live_fields((22, 5))) == set(FIELDS_SINCE)


def test_live_sacct_command():
    argv = live_sacct_command("2026-11-01", all_users=True, slurm_version=(23, 11))
    assert argv == [
        "sacct", "--parsable2", "--format=" + ",".join(SACCT_FIELDS),
        "--allusers", "--starttime", "2026-11-01",
    ]  # fmt: skip
    assert live_sacct_command(slurm_version=(22, 5, 8))[:2] == ["sacct", "--parsable2"]
    assert "--allusers" not in live_sacct_command()


def test_sacct_available():
    assert sacct_available(sys.executable)
    assert not sacct_available("hpcmem-no-such-sacct")


def _fake_sacct(tmp_path: Path, body: str) -> str:
    """A stand-in `sacct` executable: the code under test is the process handling."""
    script = tmp_path / "sacct"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_run_live_sacct_streams_sacct_output(tmp_path):
    sample = SAMPLES / "real-22.05-parsable2.psv"
    log = tmp_path / "calls"
    sacct = _fake_sacct(
        tmp_path,
        f'if [ "$1" = "--version" ]; then echo "slurm 22.05.8"; exit 0; fi\n'
        f'echo "$TZ $SLURM_TIME_FORMAT $*" >> {log}\ncat {sample}\n',
    )
    assert sacct_version(sacct) == (22, 5, 8)
    jobs = list(SacctReader(run_live_sacct("2026-11-29", all_users=True, sacct=sacct), tz=UTC))
    assert [job.job_id for job in jobs] == ["1", "2", "3", "4", "5", "6", "7"]
    call = log.read_text().strip()
    assert call.startswith("UTC standard --parsable2 --format=JobID,")
    assert "StdOut" not in call and call.endswith("--allusers --starttime 2026-11-29")


def test_run_live_sacct_drops_a_field_sacct_rejects(tmp_path):
    sample = SAMPLES / "real-22.05-parsable2.psv"
    error = (SAMPLES / "real-22.05-stdout-field-error.txt").read_text().splitlines()[1]
    log = tmp_path / "calls"
    sacct = _fake_sacct(
        tmp_path,
        f'echo "$*" >> {log}\n'
        f'case "$*" in *StdOut*) echo \'{error}\' >&2; exit 1;; esac\n'
        f'case "$*" in *StdErr*) echo \'{error.replace("StdOut", "StdErr")}\' >&2; exit 1;; esac\n'
        f"cat {sample}\n",
    )
    lines = list(run_live_sacct(slurm_version=(23, 2), sacct=sacct))
    assert len(lines) == 15
    calls = log.read_text().splitlines()
    assert len(calls) == 3 and "StdOut" in calls[0] and "StdErr" not in calls[2]


@pytest.mark.parametrize("to_stderr", [True, False])
def test_run_live_sacct_reports_sacct_failure(tmp_path, to_stderr):
    message = (SAMPLES / "real-22.05-nodbd-error.txt").read_text().splitlines()[0]
    redirect = " >&2" if to_stderr else ""
    sacct = _fake_sacct(tmp_path, f"echo '{message}'{redirect}\nexit 1\n")
    with pytest.raises(InputError, match="Slurm accounting storage is disabled"):
        list(run_live_sacct(slurm_version=(22, 5), sacct=sacct))


def test_run_live_sacct_without_sacct():
    with pytest.raises(InputError, match="not found"):
        list(run_live_sacct(sacct="hpcmem-no-such-sacct"))


def test_run_live_sacct_stops_sacct_when_the_reader_stops(tmp_path):
    sacct = _fake_sacct(
        tmp_path, 'echo "JobID|State"\nwhile true; do echo "1|COMPLETED"; done\n'
    )
    lines = run_live_sacct(slurm_version=(23, 11), sacct=sacct)
    assert next(lines) == "JobID|State\n" and next(lines) == "1|COMPLETED\n"
    lines.close()  # must kill the endless sacct instead of hanging
