"""Learned fixes: failed jobs paired with the resubmission that completed (real stores)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from sqlalchemy import func, insert, select

from hpcmem.ingest.sacct_ingest import ingest_sacct
from hpcmem.kb.lessons.learn import (
    Change,
    learn_from_history,
    module_changes,
    parse_partition_limit,
    parse_submit_line,
    partition_limit_condition,
    request_changes,
)
from hpcmem.kb.lessons.write import lesson_to_dict
from hpcmem.kb.store.models import AuditEntry, JobRecord, Lesson, LessonEvidence, Occurrence, Signature
from tests.conftest import SAMPLES

SACCT = SAMPLES / "sacct"
RESUB = SACCT / "resubmissions"
UTC = dt.timezone.utc


def ingest(store, path, cluster="lab"):
    with open(path, encoding="utf-8") as fh:
        return ingest_sacct(store, fh, cluster=cluster, tz=UTC)


def lessons_by_failed_job(store) -> dict[str, dict]:
    """Each lesson once per failed job in its evidence."""
    found = {}
    with store.session() as s:
        for lesson in s.scalars(select(Lesson)).all():
            data = lesson_to_dict(lesson)
            for ev in data["provenance"]["evidence"]:
                if ev["kind"] == "occurrence":
                    found[ev["job_id"]] = data
    return found


def evidence_pairs(lesson: dict) -> set[tuple[str, str]]:
    return {(e["kind"], e["job_id"]) for e in lesson["provenance"]["evidence"]}


def sbatch(option, before, after):
    return {"type": "sbatch", "option": option, "from": before, "to": after}


def count(store, model) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(model))


@pytest.fixture
def lab_week(store_factory):
    store = store_factory().open()
    ingest(store, SACCT / "lab-week.psv")
    return store


# --------------------------------------------------------------------------- lab-week stories


def test_lab_week_stories_become_inferred_lessons(lab_week):
    summary = learn_from_history(lab_week)
    lessons = lessons_by_failed_job(lab_week)

    oom = lessons["52004"]
    assert oom["category"] == "host_oom"
    assert (oom["provenance"]["source"], oom["status"]) == ("inferred", "candidate")
    assert oom["actions"] == [sbatch("--mem", "8G", "32G")]
    assert oom["cause"] == "Job ran out of memory at 8G (MaxRSS 7.8G)."
    assert oom["fix"].startswith("The resubmission with --mem=32G (was 8G) completed (job 52005")
    assert {("occurrence", "52004"), ("fixed_by", "52005")} <= evidence_pairs(oom)
    assert {(c["kind"], c["name"]) for c in oom["conditions"]} == {("cluster", "lab"), ("partition", "cpu")}

    step_oom = lessons["52008"]  # the srun step ran out of memory; the allocation only says FAILED 1:0
    assert step_oom["category"] == "host_oom"
    assert step_oom["actions"] == [sbatch("--mem", "32G", "64G")]
    assert evidence_pairs(step_oom) == {("occurrence", "52008"), ("fixed_by", "52010")}

    timeout = lessons["52021"]
    assert timeout["category"] == "time_limit"
    assert timeout["actions"] == [sbatch("--time", "04:00:00", "12:00:00")]
    assert timeout["cause"] == "Job hit its time limit of 04:00:00 after 04:00:32."
    limit = [c for c in timeout["conditions"] if c["kind"] == "partition_limit"]
    assert limit == [{"kind": "partition_limit", "name": "cpu:MaxTime", "value": "43200", "op": ">="}]
    assert parse_partition_limit(limit[0]) == ("cpu", "MaxTime", ">=", 43200)

    cap = lessons["52026"]  # gpu_test's 1 h cap: the fix moved the job to gpu
    assert cap["category"] == "time_limit"
    assert sorted(cap["actions"], key=lambda a: a["option"]) == [
        sbatch("--partition", "gpu_test", "gpu"), sbatch("--time", "01:00:00", "06:00:00")]
    assert {"kind": "partition", "name": "gpu_test", "value": None, "op": None} in cap["conditions"]
    assert {"kind": "partition_limit", "name": "gpu:MaxTime", "value": "21600", "op": ">="} in cap["conditions"]
    assert evidence_pairs(cap) == {("occurrence", "52026"), ("fixed_by", "52027")}

    gpu = lessons["52038"]  # exit 1 on a V100, completed on an A100
    assert gpu["category"] == "nonzero_exit"
    assert gpu["actions"] == [sbatch("--gres", "gpu:v100:1", "gpu:a100:1")]
    assert gpu["cause"] == "Job failed with exit code 1."
    assert gpu["confidence"] == 0.35  # a generic failure: every difference is a guess

    # The array task that ran out of memory at 4G was fixed by the same --mem=32G: it
    # confirms the 52004 lesson instead of adding a new one (its CPU change is not an action).
    assert lessons["52067_7"]["lesson_id"] == oom["lesson_id"]
    assert oom["confirmations"] == 1 and oom["confidence"] == 0.55
    assert {("occurrence", "52067_7"), ("fixed_by", "52087")} <= evidence_pairs(oom)
    assert "--cpus-per-task 2 -> 4" not in str(oom["actions"])

    # No lesson: same memory again (52022), memory lowered (52055), no follow-up inside
    # 48 h (52041, 52054), cancelled by the user (52050), node failure / preemption.
    # A job name alone is no resubmission: 52042 and 52088 differ in script and work dir
    # from the later jobs of the same name.
    for job in ("52022", "52055", "52041", "52054", "52050", "52056", "52066", "52042", "52088"):
        assert job not in lessons
    assert summary.as_dict()["lessons_created"] == 6 == count(lab_week, Lesson)
    assert (summary.lessons_confirmed, summary.pairs_found) == (1, 10)
    assert summary.skipped == {"cancelled": 1, "no_followup": 7, "no_relevant_change": 2}
    assert sorted(summary.lesson_ids) == sorted({d["lesson_id"] for d in lessons.values()})


def test_relearning_is_idempotent_and_new_pairs_confirm(lab_week):
    learn_from_history(lab_week)
    before = lessons_by_failed_job(lab_week)
    evidence = count(lab_week, LessonEvidence)

    unchanged = learn_from_history(lab_week)  # nothing written since: nothing read
    assert (unchanged.mode, unchanged.jobs_read, unchanged.pairs_found) == ("incremental", 0, 0)
    again = learn_from_history(lab_week, full=True)
    assert (again.mode, again.lessons_created, again.lessons_confirmed, again.pairs_found) == ("full", 0, 0, 10)
    assert again.skipped["already_learned"] == 7
    assert count(lab_week, Lesson) == 6 and count(lab_week, LessonEvidence) == evidence
    after = lessons_by_failed_job(lab_week)
    assert {k: (v["confirmations"], v["confidence"]) for k, v in after.items()} == {
        k: (v["confirmations"], v["confidence"]) for k, v in before.items()}

    # A new week brings relax_slab: 16G ran out, 32G completed -> the same "--mem=32G" lesson.
    ingest(lab_week, RESUB / "lab-followups.psv")
    third = learn_from_history(lab_week)
    assert third.mode == "incremental"
    oom = lessons_by_failed_job(lab_week)["53013"]
    assert oom["lesson_id"] == before["52004"]["lesson_id"]
    assert (oom["confirmations"], oom["confidence"]) == (2, 0.6)
    assert {("occurrence", "53013"), ("fixed_by", "53014")} <= evidence_pairs(oom)
    assert (third.lessons_confirmed, third.lessons_created) == (1, 5)  # the other five stories are new
    with lab_week.session() as s:
        confirms = s.scalars(select(AuditEntry).where(AuditEntry.action == "confirm",
                                                      AuditEntry.object_id == oom["lesson_id"])).all()
    assert [(a.before["confirmations"], a.after["confirmations"]) for a in confirms] == [(0, 1), (1, 2)]
    assert learn_from_history(lab_week).lessons_confirmed == 0


def test_pairs_outside_the_window_are_not_used(lab_week):
    # 52004 -> 52005 (7 min) and 52026 -> 52027 (8 min) fit 12 minutes; the other stories do not.
    summary = learn_from_history(lab_week, window_hours=0.2)
    lessons = lessons_by_failed_job(lab_week)
    assert set(lessons) == {"52004", "52026"}
    assert summary.lessons_created == 2
    assert summary.skipped["no_followup"] > 7


def test_window_decides_a_late_resubmission(store_factory):
    store = store_factory().open()
    ingest(store, RESUB / "lab-followups.psv")
    learn_from_history(store)  # 53030 came 70 h after 53005
    assert "53005" not in lessons_by_failed_job(store)
    learn_from_history(store, window_hours=96)
    late = lessons_by_failed_job(store)["53005"]
    assert late["actions"] == [sbatch("--mem", "16G", "48G")]
    assert evidence_pairs(late) == {("occurrence", "53005"), ("fixed_by", "53030")}


# --------------------------------------------------------------------------- follow-up stories


def test_followup_stories(store_factory):
    store = store_factory().open()
    ingest(store, RESUB / "lab-followups.psv")
    summary = learn_from_history(store)
    lessons = lessons_by_failed_job(store)

    # --wrap command not found (exit 127): only the module load counts.
    wrap = lessons["53003"]
    assert wrap["actions"] == [{"type": "module", "op": "load", "name": "python/3.11.5"}]
    assert wrap["cause"] == "Job failed with exit code 127."
    # The wrong CUDA module in a --wrap command: a swap.
    assert lessons["53017"]["actions"] == [{"type": "module", "op": "swap", "from": "cuda/11.8", "name": "cuda/12.4"}]
    # Memory raised in #SBATCH: submit lines are equal, the records tell the change.
    assert lessons["53008"]["actions"] == [sbatch("--mem", "4G", "16G")]
    # Per-CPU memory keeps its option.
    assert lessons["53010"]["actions"] == [sbatch("--mem-per-cpu", "2G", "4G")]
    # A new job name (-J blast_b) but the same script: still a resubmission.
    assert lessons["53019"]["actions"] == [sbatch("--mem", "4G", "12G")]
    assert evidence_pairs(lessons["53019"]) == {("occurrence", "53019"), ("fixed_by", "53020")}
    # 8G and 16G ran out, 32G completed: the lesson is the last step.
    assert lessons["53013"]["actions"] == [sbatch("--mem", "16G", "32G")]
    assert "53012" not in lessons

    for job in ("53001", "53015", "53006", "53005"):  # transient x2, cancelled, outside 48 h
        assert job not in lessons
    assert summary.transient == 2
    assert summary.skipped == {"cancelled": 1, "no_followup": 1, "superseded": 1}
    assert summary.lessons_created == 6


def test_real_format_failure_and_resubmission(store_factory):
    """The real Slurm 22.05 dump plus two resubmission rows (see the README there)."""
    derived = (RESUB / "real-22.05-oom-timeout-resubmitted.psv").read_text(encoding="utf-8").splitlines()
    assert derived[:15] == (SACCT / "real-22.05-parsable2.psv").read_text(encoding="utf-8").splitlines()
    assert [line.split("|")[0] for line in derived[15:]] == ["9", "9.batch", "10", "10.batch"]
    store = store_factory().open()
    ingest(store, RESUB / "real-22.05-oom-timeout-resubmitted.psv", cluster="testcl")
    summary = learn_from_history(store)
    lessons = lessons_by_failed_job(store)
    assert set(lessons) == {"4", "1"}

    oom = lessons["4"]  # --mem=50M came from #SBATCH, 400M from the command line
    assert oom["category"] == "host_oom"
    assert oom["actions"] == [sbatch("--mem", "50M", "400M")]
    assert oom["cause"] == "Job ran out of memory at 50M (MaxRSS 43M)."
    assert "MaxRSS 301M" in oom["fix"]
    assert evidence_pairs(oom) == {("occurrence", "4"), ("fixed_by", "9")}

    timeout = lessons["1"]  # debug's MaxTime is 2 min: `-p main --time=15` fixed it
    assert sorted(timeout["actions"], key=lambda a: a["option"]) == [
        sbatch("--partition", "debug", "main"), sbatch("--time", "00:01:00", "00:15:00")]
    assert {"kind": "partition_limit", "name": "main:MaxTime", "value": "900", "op": ">="} in timeout["conditions"]
    assert {"kind": "cluster", "name": "testcl", "value": None, "op": None} in timeout["conditions"]
    assert summary.skipped == {"no_followup": 4}


def test_a_lesson_someone_recorded_with_the_same_fix_is_confirmed_not_written_again(store_factory):
    """Issue 34, item 3: an agent recorded the fix of a failed job; the resubmission that
    completed confirms that lesson (evidence, confidence up, its words kept) instead of
    becoming a second lesson, however the same fix is spelled (32768M for 32G; load for swap).
    A rejected lesson is not confirmed, and a different fix is still learned."""
    from hpcmem.kb.lessons.curation import reject_lesson
    from hpcmem.kb.lessons.from_error import record
    from hpcmem.kb.store.stack import StoreStack

    store = store_factory().open()
    ingest(store, RESUB / "lab-followups.psv")
    stack = StoreStack(user=store)
    told = {job: record(stack, cause=f"cause of {job}", fix=f"what fixed {job}", author="carol", source="agent",
                        job_id=job, actions=[action])
            for job, action in (("53013", "--mem=32768M"),  # learned as --mem 16G -> 32G
                                ("53017", "module load cuda/12.4"),  # learned as module swap cuda/11.8 cuda/12.4
                                ("53019", "--mem=12G"),  # rejected below: learn writes its own
                                ("53010", "--mem-per-cpu=8G"))}  # another fix than the 2G -> 4G that ran
    reject_lesson(stack, told["53019"]["lesson_id"], actor="carol", reason="wrong")
    summary = learn_from_history(store)
    assert (summary.lessons_created, summary.lessons_confirmed) == (6 - 2, 2)
    lessons = lessons_by_failed_job(store)
    for job in ("53013", "53017"):
        assert lessons[job]["lesson_id"] == told[job]["lesson_id"]
        assert lessons[job]["fix"] == f"what fixed {job}" and lessons[job]["confirmations"] == 1
        assert lessons[job]["confidence"] > told[job]["confidence"]
        assert ("fixed_by", {"53013": "53014", "53017": "53018"}[job]) in evidence_pairs(lessons[job])
        assert [e["kind"] for e in lessons[job]["provenance"]["evidence"]].count("occurrence") == 1
    with store.session() as s:
        inferred = {(row.actions[0].get("option") or row.actions[0].get("name"), row.actions[0]["to"]
                     if row.actions[0]["type"] == "sbatch" else "") for row in
                    s.scalars(select(Lesson).where(Lesson.source == "inferred"))}
    assert ("--mem", "32G") not in inferred and ("cuda/12.4", "") not in inferred
    assert ("--mem", "12G") in inferred and ("--mem-per-cpu", "4G") in inferred
    # the next run counts nothing twice
    again = learn_from_history(store, full=True)
    assert (again.lessons_created, again.lessons_confirmed) == (0, 0)


def test_failure_without_successful_followup_teaches_nothing(store_factory):
    store = store_factory().open()
    ingest(store, SACCT / "real-22.05-parsable2.psv", cluster="testcl")
    summary = learn_from_history(store)
    assert count(store, Lesson) == 0
    assert (summary.pairs_found, summary.lessons_created) == (0, 0)
    assert summary.skipped == {"no_followup": 6}


# --------------------------------------------------------------------------- submit lines and diffs


@pytest.mark.parametrize(
    "line, script, options, modules",
    [
        ("sbatch --mem=8G align.sh", "align.sh", {"--mem": "8G"}, ()),
        ("sbatch -p gpu -t 60 --exclusive -c8 run.sh sample_1 --fast", "run.sh",
         {"--partition": "gpu", "--time": "60", "--exclusive": "", "--cpus-per-task": "8"}, ()),
        ("sbatch --parsable --job-name=fasttimeout --time=5 --mem=50M --output=%x-%j.out --wrap=sleep 600",
         "wrap:sleep 600", {"--parsable": "", "--job-name": "fasttimeout", "--time": "5", "--mem": "50M",
                            "--output": "%x-%j.out"}, ()),
        ("sbatch --wrap=module load gcc/12.2.0 cuda/11.8 && module swap cuda/11.8 cuda/12.4 && python x.py",
         "wrap:python x.py", {}, ("gcc/12.2.0", "cuda/12.4")),
        ("srun --mem=4G ml python/3.11 ; python3 -m pytest", "python3 -m pytest", {"--mem": "4G"}, ("python/3.11",)),
        ("sbatch --time=08:00:00 --mem=16G : --partition=gpu --gres=gpu:2 coupled.sh", "coupled.sh", {}, ()),
        ("", None, {}, ()),
    ],
)
def test_parse_submit_line(line, script, options, modules):
    parsed = parse_submit_line(line)
    assert (parsed.script, parsed.options, parsed.modules) == (script, options, modules)


class Rec:
    def __init__(self, submit_line, **kw):
        self.submit_line = submit_line
        for attr in ("req_mem_mb", "req_time_s", "partition", "req_gres", "req_cpus", "constraints"):
            setattr(self, attr, kw.get(attr))


def test_request_changes_prefer_records_for_meaning_and_lines_for_spelling():
    same_mem = request_changes(Rec("sbatch --mem=32G a.sh", req_mem_mb=32768), Rec("sbatch --mem=32768M a.sh", req_mem_mb=32768))
    assert same_mem == []
    spelled = request_changes(Rec("sbatch --time=90 a.sh", req_time_s=5400), Rec("sbatch --time=3:00:00 a.sh", req_time_s=10800))
    assert spelled == [Change("--time", "01:30:00", "03:00:00")]
    gres = request_changes(Rec("sbatch a.sh", req_gres="gpu=1,gpu:v100=1"), Rec("sbatch a.sh", req_gres="gpu=1,gpu:a100=1"))
    assert gres == [Change("--gres", "gpu:v100:1", "gpu:a100:1")]
    dropped = request_changes(Rec("sbatch -p debug a.sh", partition="debug"), Rec("sbatch a.sh", partition="cpu"))
    assert dropped == [Change("--partition", "debug", "cpu")]
    other = request_changes(Rec("sbatch --nodes=2 --qos=low a.sh"), Rec("sbatch --qos=high a.sh"))
    assert other == [Change("--nodes", "2", None), Change("--qos", "low", "high")]


def test_module_changes():
    actions = module_changes("sbatch --wrap=module load gcc/12.2.0 cuda/11.8 openmpi && ./a",
                             "sbatch --wrap=module load gcc/13.1.0 cuda/11.8 hdf5/1.14 && ./a")
    assert actions == [
        {"type": "module", "op": "swap", "from": "gcc/12.2.0", "name": "gcc/13.1.0"},
        {"type": "module", "op": "load", "name": "hdf5/1.14"},
        {"type": "module", "op": "unload", "name": "openmpi"},
    ]


def test_partition_limit_encoding_round_trips():
    cond = partition_limit_condition("gpu_test", 14400)
    assert cond.as_dict() == {"kind": "partition_limit", "name": "gpu_test:MaxTime", "value": "14400", "op": ">="}
    assert parse_partition_limit(cond) == ("gpu_test", "MaxTime", ">=", 14400)


# --------------------------------------------------------------------------- scale


def test_250k_job_records_are_learned_in_seconds(store_factory):
    """2,500 users x 100 jobs; every tenth job runs out of memory and the next one, with
    twice the memory, completes: 25,000 pairs, one lesson, 24,999 confirmations. On
    PostgreSQL the tables have no statistics yet, as right after a big ingest."""
    store = store_factory().open()
    start = dt.datetime(2026, 1, 1, tzinfo=UTC)
    with store.transaction() as s:
        conn = s.connection()
        conn.execute(insert(Signature.__table__), [{"fingerprint": "0" * 16, "category": "host_oom", "count": 0,
                                                    "template": "out of memory", "first_seen": start, "last_seen": start}])
        sig = conn.execute(select(Signature.id)).scalar_one()
        jobs, occurrences = [], []
        for user in range(2500):
            for n in range(100):
                job_id, failed = str(user * 100 + n), n % 10 == 3
                mem = 16384 if n % 10 == 4 else 8192
                submit = start + dt.timedelta(hours=n)
                end = submit + dt.timedelta(minutes=10)
                jobs.append({
                    "cluster": "big", "job_id": job_id, "user_name": f"u{user}", "account": "a", "job_name": f"step{n // 10}",
                    "partition": "cpu", "state": "OUT_OF_MEMORY" if failed else "COMPLETED", "failed": failed,
                    "req_mem_mb": mem, "req_cpus": 4, "req_gres": None, "req_time_s": 14400, "constraints": None,
                    "max_rss_mb": mem * 0.98, "elapsed_s": 600, "work_dir": f"/home/u{user}/w",
                    "submit_line": f"sbatch --mem={mem // 1024}G --time=04:00:00 step{n // 10}.sh",
                    "submit_time": submit, "end_time": end})
                if failed:
                    occurrences.append({"cluster": "big", "job_id": job_id, "signature_id": sig, "user_name": f"u{user}",
                                        "state": "OUT_OF_MEMORY", "source": "sacct", "submit_time": submit,
                                        "end_time": end, "observed_at": start})
        conn.execute(insert(JobRecord.__table__), jobs)
        conn.execute(insert(Occurrence.__table__), occurrences)
    began = time.perf_counter()
    summary = learn_from_history(store)
    seconds = time.perf_counter() - began
    assert (summary.pairs_found, summary.lessons_created, summary.lessons_confirmed) == (25000, 1, 24999)
    assert count(store, LessonEvidence) == 50000
    assert seconds < 30, f"learning 250k job records took {seconds:.1f} s"
    began = time.perf_counter()
    again = learn_from_history(store, full=True)
    assert again.skipped == {"already_learned": 25000} and time.perf_counter() - began < 30


# --------------------------------------------------------------------------- incremental runs


OOM = ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId={job}.batch. Some of your processes may have "
       "been killed by the cgroup out-of-memory handler.")
TIMEOUT = "slurmstepd: error: *** JOB {job} ON n1 CANCELLED AT 2026-03-01T00:00:00 DUE TO TIME LIMIT ***"


def history(seed: int = 3, users: int = 12, jobs: int = 80):
    """Jobs of several users in submit order: failures (some running for days, some
    failing twice before the fix), resubmissions that raise memory or time or change
    nothing, windows that overlap any split."""
    import random

    rng = random.Random(seed)
    out = []
    for user in range(users):
        t = dt.datetime(2026, 3, 1, tzinfo=UTC) + dt.timedelta(hours=rng.random() * 20)
        mem, hours = 4, 2
        for n in range(jobs):
            name = f"run{rng.randrange(3)}"
            job_id = f"{user}{n:04d}"
            failed = rng.random() < 0.3
            kind = rng.choice(("oom", "timeout"))
            minutes = rng.choice((5, 30, 90, 60 * 24 * 3)) if failed else rng.randint(1, 120)
            state = ("OUT_OF_MEMORY" if kind == "oom" else "TIMEOUT") if failed else "COMPLETED"
            job = {"cluster": "lab", "job_id": job_id, "user_name": f"u{user}", "account": "a", "job_name": name,
                   "partition": "cpu", "state": state, "failed": failed, "req_mem_mb": mem * 1024.0, "req_cpus": 2,
                   "req_time_s": hours * 3600, "work_dir": f"/home/u{user}/w", "elapsed_s": minutes * 60,
                   "submit_line": f"sbatch --mem={mem}G --time={hours:02d}:00:00 {name}.sh",
                   "submit_time": t, "end_time": t + dt.timedelta(minutes=minutes)}
            failure = None
            if failed:
                failure = {k: job[k] for k in ("cluster", "job_id", "job_name", "user_name", "partition", "state",
                                               "submit_time", "end_time")}
                failure |= {"exit_code": 0, "source": "sacct",
                            "message": (OOM if kind == "oom" else TIMEOUT).format(job=job_id)}
                if rng.random() < 0.7:  # the next attempt asks for more
                    mem, hours = (mem * 2, hours) if kind == "oom" else (mem, hours * 2)
            out.append((job, failure))
            t += dt.timedelta(hours=rng.choice((0.2, 1, 5, 20, 40, 70)))
    return sorted(out, key=lambda item: (item[0]["submit_time"], item[0]["job_id"]))


def record(store, items) -> None:
    from hpcmem.kb.jobs.write import Recorder

    recorder = Recorder(store)
    for job, failure in items:
        recorder.add(dict(job) if job else None, dict(failure) if failure else None)
    recorder.close()


def learned(store) -> list[tuple]:
    """Inferred lessons by content: signature, actions, conditions, counts, evidence.
    An action's "from" (and the texts) come from whichever pair created the lesson, which
    depends on the order jobs arrived in, for a full run as much as for an incremental one."""
    out = []
    with store.session() as s:
        for lesson in s.scalars(select(Lesson).where(Lesson.source == "inferred")).all():
            data = lesson_to_dict(lesson)
            actions = [sorted((k, v) for k, v in a.items() if k != "from") for a in data["actions"]]
            out.append((lesson.fingerprint, repr(sorted(actions)),
                        repr(sorted(tuple(sorted(c.items())) for c in data["conditions"])), data["confirmations"],
                        round(data["confidence"], 4), tuple(sorted(evidence_pairs(data)))))
    return sorted(out)


@pytest.mark.parametrize("parts, seed, order", [(2, 3, 1), (5, 4, 1), (12, 5, 1), (2, 6, -1), (7, 7, -1)])
def test_incremental_runs_learn_what_one_full_run_learns(store_factory, parts, seed, order):
    """Parts recorded in time order, or latest first (a failure arrives after the job that fixed it)."""
    items = history(seed)
    whole = store_factory().open()
    record(whole, items)
    full = learn_from_history(whole)
    assert full.mode == "full" and full.lessons_created > 5 and full.lessons_confirmed > 5

    store = store_factory("parts").open()
    size = -(-len(items) // parts)
    reads = []
    for start in list(range(0, len(items), size))[::order]:
        record(store, items[start:start + size])
        summary = learn_from_history(store)
        reads.append(summary.jobs_read)
    assert summary.mode == "incremental" and reads[0] is None  # the first run has no watermark
    assert all(read < len(items) for read in reads[1:])
    # The lesson a pair creates may differ (whichever pair came first); what is learned does not.
    assert learned(store) == learned(whole)


def test_a_job_that_completes_later_or_gains_its_occurrence_later_is_learned(store_factory):
    store = store_factory().open()
    start = dt.datetime(2026, 3, 1, tzinfo=UTC)
    failed = {"cluster": "lab", "job_id": "1", "user_name": "u", "job_name": "fit", "partition": "cpu",
              "state": "OUT_OF_MEMORY", "failed": True, "req_mem_mb": 4096.0, "work_dir": "/w",
              "submit_line": "sbatch --mem=4G fit.sh", "submit_time": start, "end_time": start + dt.timedelta(hours=1)}
    retry = failed | {"job_id": "2", "state": "RUNNING", "failed": False, "req_mem_mb": 8192.0,
                      "submit_line": "sbatch --mem=8G fit.sh", "submit_time": start + dt.timedelta(hours=2),
                      "end_time": None}
    record(store, [(failed, None), (retry, None)])  # no occurrence yet: nothing to learn
    assert learn_from_history(store).pairs_found == 0
    record(store, [(None, {k: failed[k] for k in ("cluster", "job_id", "user_name", "state", "submit_time",
                                                  "end_time")} | {"source": "log", "message": OOM.format(job=1)})])
    assert learn_from_history(store).pairs_found == 0  # the occurrence came; the retry still runs
    record(store, [(retry | {"state": "COMPLETED", "end_time": start + dt.timedelta(hours=3)}, None)])
    summary = learn_from_history(store)
    assert (summary.mode, summary.lessons_created) == ("incremental", 1)
    assert learned(store)[0][1] == repr([[("option", "--mem"), ("to", "8G"), ("type", "sbatch")]])


def test_job_name_stems_take_linear_time_and_strip_the_same_suffixes():
    """A long run of digits not at the end of a job name made the stem regex split it every
    possible way (24 digits: 2 s; learn hung on a 2,500-character name)."""
    from hpcmem.kb.lessons.learn import _stem

    started = time.perf_counter()
    assert _stem("job" + "1" * 26 + "x") == "job" + "1" * 26 + "x"  # (about 9 s before)
    assert _stem("r1-" * 300 + "x").endswith("x")
    assert time.perf_counter() - started < 1.0
    assert [_stem(n) for n in ("train_v3", "align-run12", "fit.retry2", "sim_2026_11_24", "job42", "123")] == \
        ["train", "align", "fit", "sim", "job", "123"]
