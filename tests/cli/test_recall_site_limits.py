"""One rejection message, several causes: with the site's limits stored, recall lets the limit
each job broke choose between lessons of the same text (issues 26 and 27).

Texts are sbatch's real stderr on the project's harness (data/samples/harness/rejections/); the
site is the harness as Slurm printed it (data/samples/env/real-slurm-limits/: one node of 2
CPUs, 2000M and gpu:2)."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import run_hpcmem
from tests.conftest import SAMPLES

HARNESS = SAMPLES / "env" / "real-slurm-limits"
REJECTIONS = SAMPLES / "harness" / "rejections"
NODE_CONFIG = json.loads((REJECTIONS / "1-node-config-gpu-count.json").read_text())["stderr"]
ALICE = {"LOGNAME": "alice", "USER": "alice"}


def snapshot():
    stored = run_hpcmem("env", "snapshot", "--modules", str(SAMPLES / "env" / "real-debian-lmod" / "module-t-avail.txt"),
                        "--partitions", str(HARNESS / "scontrol-show-partition-oneliner.txt"),
                        "--nodes", str(HARNESS / "scontrol-show-node-oneliner.txt"),
                        "--qos", str(HARNESS / "sacctmgr-show-qos.txt"), "--assoc", str(HARNESS / "sacctmgr-show-assoc.txt"),
                        "--users", str(HARNESS / "sacctmgr-show-user.txt"))
    assert stored.returncode == 0, stored.stderr


@pytest.fixture
def two_lessons(hpcmem_home):
    """The same refusal text, learnt twice: once for too much memory, once for too many GPUs."""
    for args, cause, fix in (
        ("--mem=4000M", "no node has that much memory", "ask at most the node's 2000M (--mem=2000M)"),
        ("--gres=gpu:3", "no node has that many GPUs", "ask at most the node's 2 GPUs (--gres=gpu:2)"),
    ):
        done = run_hpcmem("record", "--error", NODE_CONFIG, "--sbatch-args", args, "--cause", cause, "--fix", fix,
                          "--json", env=ALICE)
        assert done.returncode == 0, done.stderr


def recall(args: str) -> dict:
    result = run_hpcmem("recall", NODE_CONFIG, "--sbatch-args", args, "--json", env=ALICE)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_the_limit_the_job_broke_chooses_the_lesson(two_lessons):
    snapshot()
    gpus = recall("--gres=gpu:4 -c 1")
    first = gpus["matches"][0]
    assert first["band"] == "match" and "GPUs" in first["cause"]
    assert "broken limit (gres count)" in first["context_agrees"]
    other = next(m for m in gpus["matches"] if "memory" in m["cause"])
    assert other["band"] == "related"
    assert {"field": "broken limit", "query": "gres count", "lesson": "memory per node", "kind": "context",
            "matters": True} in other["differs"]
    assert gpus["context_decided"] is True

    memory = recall("--mem=3G")
    assert memory["matches"][0]["band"] == "match" and "memory" in memory["matches"][0]["cause"]
    assert all(m["band"] != "match" for m in memory["matches"] if "GPUs" in m["cause"])


def test_without_the_sites_limits_neither_lesson_is_chosen_by_a_limit(two_lessons):
    gpus = recall("--gres=gpu:4 -c 1")
    assert not any("broken limit" in str(m["context_agrees"]) + str(m["differs"]) for m in gpus["matches"])


def test_a_job_that_breaks_no_limit_the_site_shows_is_not_matched_by_either(two_lessons):
    snapshot()
    fits = recall("--mem=1G --gres=gpu:1")  # the site would take it: the refusal is something else
    assert all(m["band"] != "match" for m in fits["matches"])
    assert any(d["field"] == "broken limit" and d["query"] == "no limit the snapshot shows"
               for m in fits["matches"] for d in m["differs"])


def test_two_of_slurms_wordings_for_one_broken_limit_are_one_cause(hpcmem_home):
    # sbatch words too many CPUs per node as "More processors requested than permitted" (the
    # context corpus's real harness output, -c 3) or as "CPU count per node can not be satisfied
    # ... Requested node configuration is not available" (--mincpus=4): the site's limits say
    # both jobs broke the node's 2 CPUs, so the wording no longer keeps the lesson apart.
    corpus = SAMPLES.parent / "corpus" / "context-validation" / "instances.jsonl"
    more = next(i for i in map(json.loads, corpus.read_text().splitlines()) if i["id"] == "ctxv-0016")["text"]
    mincpus = json.loads((REJECTIONS / "1-node-config-mincpus.json").read_text())["stderr"]
    done = run_hpcmem("record", "--error", more, "--sbatch-args", "-c 3", "--cause", "more CPUs per node than a node has",
                      "--fix", "ask at most the node's 2 CPUs (-c 2)", "--json", env=ALICE)
    assert done.returncode == 0, done.stderr

    def ask() -> list[dict]:
        result = run_hpcmem("recall", mincpus, "--sbatch-args", "--mincpus=4", "--json", env=ALICE)
        assert result.returncode in (0, 1), result.stderr
        return json.loads(result.stdout)["matches"]

    # no site known: two messages of one emitter, two failures (too far apart to be shown)
    assert all(m["band"] != "match" for m in ask())
    snapshot()
    after = ask()[0]
    assert after["band"] == "match" and "broken limit (cpus per node)" in after["context_agrees"]
    assert not any(d["kind"] == "name" and d["matters"] for d in after["differs"])


def test_one_refused_pair_is_not_another(hpcmem_home):
    # The fresh collection's real refusals on the harness (data/corpus/context-fresh/): bob may
    # use account research on debug only (ctxf-0025: research on main); account teaching is not
    # allowed on debug (ctxf-0024, alice). Both broke "account partition", with opposite fixes.
    fresh = SAMPLES.parent / "corpus" / "context-fresh"
    item = {i["id"]: i for i in map(json.loads, (fresh / "instances.jsonl").read_text().splitlines())}
    site = fresh / "site"
    stored = run_hpcmem("env", "snapshot", "--modules", str(SAMPLES / "env" / "real-debian-lmod" / "module-t-avail.txt"),
                        "--partitions", str(site / "scontrol-show-partition-oneliner.txt"),
                        "--nodes", str(site / "scontrol-show-node-oneliner.txt"), "--qos", str(site / "sacctmgr-show-qos.txt"),
                        "--assoc", str(site / "sacctmgr-show-assoc.txt"), "--users", str(site / "sacctmgr-show-user.txt"))
    assert stored.returncode == 0, stored.stderr
    bob = {"LOGNAME": "bob", "USER": "bob"}
    done = run_hpcmem("record", "--error", item["ctxf-0025"]["text"], "--sbatch-args", "-A research -p main",
                      "--cause", "account research may be used on partition debug only", "--fix", "submit with -p debug",
                      "--action", "sbatch:--partition=debug", "--json", env=bob)
    assert done.returncode == 0, done.stderr

    def ask(args: str, env: dict) -> dict:
        result = run_hpcmem("recall", item["ctxf-0024"]["text"], "--sbatch-args", args, "--json", env=env)
        assert result.returncode in (0, 1), result.stderr
        return json.loads(result.stdout)["matches"][0]

    same_pair = ask("-A research -p main", bob)
    assert same_pair["band"] == "match" and "broken limit (account partition)" in same_pair["context_agrees"]
    other_pair = ask("-A teaching -p debug -q short", ALICE)
    assert other_pair["band"] == "related" and "broken limit (account partition)" in other_pair["context_agrees"]
    assert {"field": "account", "query": "teaching", "lesson": "research", "kind": "context",
            "matters": True} in other_pair["differs"]
