"""Recall with and without the job's context, on the context corpus (data/corpus/context/).

    .venv/bin/python bench/bench_context_recall.py [--part heldout] [--json out.json] [--write docs/benchmarks.md]
    .venv/bin/python bench/bench_context_recall.py --part validation
    .venv/bin/python bench/bench_context_recall.py --part fresh
    .venv/bin/python bench/bench_context_recall.py --part fresh2

The corpus holds real failures made on the project's Slurm harness, each with the job context
Slurm, the script and the job's environment gave (see its README). Each class gets one lesson,
recorded from its first instance (by id) with the class's cause, fix and actions and that
instance's context, as `hpcmem record --script/--sbatch-args` would store it. Lessons of every
class are in the store (both parts), so look-alike classes compete. The part's other instances
are the queries, asked twice in the same run:

- **with context**: the error text and the instance's context (as an agent passes its script);
- **text only**: the error text alone (context withheld);

and a BM25 baseline over the lessons' recorded texts (the text alone; its best threshold on
this corpus's calibration part is not needed: it is reported without one, as a ranking).

Metrics: known top-1 (the right lesson first and in the match band), wrong answers among
match-band answers (the first match-band lesson is another class's), other classes' lessons
anywhere in the match band (a look-alike whose context contradicts the query's applied), and
abstention on recurrences (no match at all). Aggregates only: the script prints no query.

``--part validation`` reads the later collection, data/corpus/context-validation/ (its own
README), the part on which design choices are made so that held-out is only reported. Its
store: one lesson per validation class, recorded from that class's first validation instance
(by id) as above; plus, as competitors, one lesson for each class of the first collection that
the validation set does not define (the OOM lessons at 100/200/400M, the hpcfft loader
lessons), recorded from that class's first instance there. A class both collections define
(same cause and fix) has only its validation lesson, so every class has exactly one lesson.
The queries are the validation instances that are not a lesson's; BM25 ranks the same lessons.

``--part fresh`` and ``--part fresh2`` read the third and fourth collections,
data/corpus/context-fresh/ and context-fresh2/ (their own READMEs), made after the context rules
without looking at how recall treats them, the same way: one lesson per class from the
collection's first instance of it, and as competitors one lesson for each class of the earlier
collections that it does not define, from the latest collection that does (``COLLECTIONS``).

The site's limits (issue 27): each collection's ``site/`` folder holds the real output of
``scontrol show partition/node`` and ``sacctmgr show qos/assoc/user`` on the cluster it was made
on (``context_corpus/capture_site.py``), stored as the environment snapshot before the queries.
Each lesson is recorded by the user whose job it came from, and each query is asked as the user
who submitted it (alice, or bob in the validation, fresh and fresh2 collections), as in real use: a refused
submission is judged on that user's associations.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CORPUS = REPO / "data" / "corpus" / "context"
VALIDATION = REPO / "data" / "corpus" / "context-validation"
FRESH = REPO / "data" / "corpus" / "context-fresh"
FRESH2 = REPO / "data" / "corpus" / "context-fresh2"
SECTION = "## Recall with the job's context (context corpus)"
VALIDATION_SECTION = "## Recall with the job's context (context corpus, validation collection)"
FRESH_SECTION = "## Recall with the job's context (context corpus, fresh collection)"
FRESH2_SECTION = "## Recall with the job's context (context corpus, second fresh collection)"
# The later collections, each its own part: its folder, its section, and the earlier collections
# whose classes it does not define become competing lessons (the latest definition wins).
COLLECTIONS = {
    "validation": (VALIDATION, VALIDATION_SECTION, (CORPUS,)),
    "fresh": (FRESH, FRESH_SECTION, (VALIDATION, CORPUS)),
    "fresh2": (FRESH2, FRESH2_SECTION, (FRESH, VALIDATION, CORPUS)),
}
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "context_corpus"))  # the case tables: who submitted each case


def load(corpus: Path = CORPUS) -> tuple[dict[str, dict], list[dict]]:
    classes = {c["class"]: c for c in map(json.loads, (corpus / "classes.jsonl").read_text().splitlines())}
    instances = [json.loads(line) for line in (corpus / "instances.jsonl").read_text().splitlines() if line.strip()]
    return classes, sorted(instances, key=lambda i: i["id"])


def load_part(part: str) -> tuple[dict[str, dict], list[dict]]:
    """A part's classes and instances: the first collection's for calibration and held-out; a
    later collection's plus, as competitors, the classes it does not define from the earlier
    ones (each from the latest collection that defines it, with that collection's instances, so
    build_store records their lessons from there)."""
    if part not in COLLECTIONS:
        return load(CORPUS)
    folder, _section, earlier = COLLECTIONS[part]
    classes, instances = load(folder)
    taken, competitors, extra = set(classes), {}, []
    for other in earlier:
        other_classes, other_instances = load(other)
        chosen = {name: c for name, c in other_classes.items() if name not in taken}
        competitors |= chosen
        taken |= set(chosen)
        extra += [i for i in other_instances if i["class"] in chosen]
    return classes | competitors, sorted(instances + extra, key=lambda i: i["id"])


def corpus_actions(cls: dict) -> list[str]:
    """The class's actions in `hpcmem record --action` form (the corpus writes sbatch ones as
    `#SBATCH --mem=200M`); an action in another form stays in the fix text only."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.lessons.actions import parse_action

    out = []
    for action in cls.get("actions") or []:
        action = re.sub(r"^#SBATCH\s+", "", action.strip())
        try:
            parse_action(action)
        except InputError:
            continue
        out.append(action)
    return out


def case_users() -> dict[str, str]:
    """Case name -> the user who submitted it (the harness's lab user, alice, unless named)."""
    from cases import CASES
    from cases_fresh import CASES as FRESH_CASES
    from cases_fresh2 import CASES as FRESH2_CASES
    from cases_validation import CASES as VALIDATION_CASES

    return {c.name: c.user or "alice" for c in (*CASES, *VALIDATION_CASES, *FRESH_CASES, *FRESH2_CASES)}


def store_site(config, stack, folder: Path) -> None:  # noqa: ANN001
    """The collection's real site captures as the store's environment snapshot."""
    from hpcmem.ingest.partitions import read_partitions
    from hpcmem.ingest.site_limits import (parse_sacctmgr_assoc, parse_sacctmgr_qos, parse_sacctmgr_users,
                                           parse_scontrol_nodes)
    from hpcmem.kb.environment.history import save_snapshot
    from hpcmem.kb.environment.snapshot import EnvSnapshot

    def read(name: str) -> str:
        return (folder / name).read_text()

    snapshot = EnvSnapshot({}, read_partitions(read("scontrol-show-partition-oneliner.txt")),
                           nodes=parse_scontrol_nodes(read("scontrol-show-node-oneliner.txt")),
                           qos=parse_sacctmgr_qos(read("sacctmgr-show-qos.txt")),
                           associations=parse_sacctmgr_assoc(read("sacctmgr-show-assoc.txt")),
                           default_accounts=parse_sacctmgr_users(read("sacctmgr-show-user.txt")))
    save_snapshot(stack.user.open(), snapshot, cluster=config.get("cluster.name"), source=str(folder))


def build_store(classes: dict[str, dict], instances: list[dict]):
    from hpcmem.kb.config import load_config
    from hpcmem.kb.jobs.context import clean_context
    from hpcmem.kb.lessons.from_error import record
    from hpcmem.kb.recall.embed import Embedder, embed_missing_signatures, model_spec
    from hpcmem.kb.store.stack import StoreStack

    config = load_config()
    stack = StoreStack.from_config(config)
    users = case_users()
    lesson_class, lesson_instance = {}, set()
    for name, cls in sorted(classes.items()):
        first = next(i for i in instances if i["class"] == name)
        lesson = record(stack, cause=cls["cause"], fix=cls["fix"], author=users[first["case"]], source="human",
                        error_text=first["text"], actions=corpus_actions(cls),
                        job_context=clean_context(first["context"]))
        lesson_class[lesson["lesson_id"]] = name
        lesson_instance.add(first["id"])
    embedder = Embedder(model_spec(config))
    embed_missing_signatures(stack.user, embedder)
    return config, stack, embedder, lesson_class, lesson_instance


def hpcmem_run(config, stack, embedder, lesson_class, queries, *, with_context: bool) -> list[dict]:
    from hpcmem.kb.jobs.context import clean_context
    from hpcmem.kb.recall.recaller import Recaller, RecallQuery

    recaller = Recaller(stack, config, allow_model=True, embedder_factory=lambda: embedder, record_events=False)
    users = case_users()
    out = []
    try:
        for q in queries:
            os.environ["LOGNAME"] = users[q["case"]]  # recall judges a refusal as the user who got it
            context = clean_context(q["context"]) if with_context else {}
            started = time.perf_counter()
            result = recaller.recall(RecallQuery(text=q["text"], limit=10, context=context))
            out.append({"truth": q["class"], "seconds": time.perf_counter() - started,
                        "ranked": [(lesson_class[m["lesson_id"]], m["band"]) for m in result["matches"]],
                        "decided": result["context_decided"]})
    finally:
        recaller.close()
    return out


def bm25_run(classes, instances, lesson_instance, queries) -> list[dict]:
    """BM25 (k1 1.2, b 0.75) of each query against the lessons' recorded texts."""
    token = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*")
    docs = [(i["class"], Counter(w.lower() for w in token.findall(i["text"]))) for i in instances
            if i["id"] in lesson_instance]
    n, avg = len(docs), sum(sum(d.values()) for _, d in docs) / len(docs)
    df = Counter(w for _, d in docs for w in d)
    out = []
    for q in queries:
        words = {w.lower() for w in token.findall(q["text"])}
        scores = []
        for name, d in docs:
            length = sum(d.values())
            s = sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * d[w] * 2.2 / (d[w] + 1.2 * (0.25 + 0.75 * length / avg))
                    for w in words if w in d)
            scores.append((s, name))
        scores.sort(key=lambda t: -t[0])
        out.append({"truth": q["class"], "ranked": [(name, "match") for s, name in scores if s > 0]})
    return out


def metrics(answers: list[dict], classes: dict[str, dict]) -> dict[str, float]:
    n = len(answers)
    first_match = [next((c for c, band in a["ranked"] if band == "match"), None) for a in answers]
    answered = [(a, f) for a, f in zip(answers, first_match) if f is not None]
    wrong = sum(1 for a, f in answered if f != a["truth"])
    others = sum(1 for a in answers for c, band in a["ranked"] if band == "match" and c != a["truth"])
    family = {name: c.get("family") for name, c in classes.items()}
    lookalikes = sum(1 for a in answers for c, band in a["ranked"]
                     if band == "match" and c != a["truth"] and family.get(c) == family.get(a["truth"]))
    return {
        "queries": n,
        "known_top1": sum(1 for a, f in zip(answers, first_match) if f == a["truth"]) / n if n else 0.0,
        "right_first_any_band": sum(1 for a in answers if a["ranked"] and a["ranked"][0][0] == a["truth"]) / n if n else 0.0,
        "answered": len(answered) / n if n else 0.0,
        "wrong_among_answers": wrong / len(answered) if answered else 0.0,
        "other_class_in_match_band": others,
        "lookalike_in_match_band": lookalikes,
        "context_decided": sum(1 for a in answers if a.get("decided")) / n if n else 0.0,
    }


def render(part: str, rows: dict[str, dict], sizes: dict[str, int], seconds: float) -> str:
    folder = (COLLECTIONS[part][0] if part in COLLECTIONS else CORPUS).name
    lines = [section_of(part), "",
             f"Part **{part}** of `data/corpus/{folder}/` (real failures made on the project's Slurm harness, "
             f"with their real job context; see its README): {sizes['classes']} classes with a lesson each "
             f"(recorded from each class's first instance with that instance's context), {rows['hpcmem, with context']['queries']} "
             f"queries of this part. The context rules were adjusted on the calibration part and the validation "
             "collection only (below). Reproduce: `.venv/bin/python bench/bench_context_recall.py --part "
             f"{part} --write docs/benchmarks.md`.", "",
             "| method | known top-1 | right lesson first (any band) | answered | wrong answers among match-band answers | other classes' lessons in the match band | of them look-alikes (same family) | context decided |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, m in rows.items():
        decided = f"{m['context_decided']:.3f}" if "with context" in name else "-"
        if name.startswith("BM25"):
            lines.append(f"| {name} | - | {m['right_first_any_band']:.3f} | - | - | - | - | - |")
            continue
        lines.append(f"| {name} | {m['known_top1']:.3f} | {m['right_first_any_band']:.3f} | {m['answered']:.3f} | "
                     f"{m['wrong_among_answers']:.3f} | {m['other_class_in_match_band']} | {m['lookalike_in_match_band']} | {decided} |")
    lines += ["", f"One run, {seconds:.0f} s in all (store, both hpcmem runs and BM25).", ""]
    notes = NOTES.get(part)
    if notes:
        lines += [notes.strip(), ""]
    return "\n".join(lines)


# What each part's figures mean, kept here so a rerun with --write keeps the record.
NOTES = {"heldout": """
How this came to be (2026-12-05), six runs of this part in all, no query of it read.

1. The context rules (`kb/recall/context_match.py`) were written from the issue and the project's
   own scenarios (`tests/cli/test_context_recall.py`: a learned 8G -> 32G / 32G -> 64G ladder,
   node configuration for GPUs, CPUs and memory), then adjusted on this corpus's calibration
   part, inspected case by case (it holds the job-ended, module and library families). The
   seeded split put every out-of-memory and refused-submission family here, so none of them had
   been seen. **First run (at 37a4edf)**: with context known top-1 0.484, right lesson first
   0.742, answered 0.581, wrong among match-band answers 0.167, other classes' lessons in the
   match band 3; text only 0.516 / 0.645 / 0.806 / 0.360 / 25. Context cut the wrong answers
   but abstained on too much.
2. A validation collection of new real failures was then made on the harness
   (`data/corpus/context-validation/`: other programs, amounts, users, a second library) and
   inspected case by case as a second calibration set. The changes chosen there (3ba1fe3:
   memory as a node gives it, amounts within a tenth, refusals by the shape of the GPU request,
   account and QOS names as soft evidence, the context choosing among look-alikes) took it from
   known top-1 0.552 to 0.793. **Second run (at 3ba1fe3)**: known top-1 0.677, right lesson
   first 0.968, answered 0.742, wrong among answers 0.160, other classes in the match band 6.
   What was left was what the job's facts cannot say without the site's own limits.
3. Issue 27 then gave recall the site's limits (nodes, QOS, associations in the environment
   snapshot). For a refused submission, the limit each job broke on that site
   (`kb/recall/site_match.py`: the same one agrees, and differing amounts on what it is about
   no longer contradict; another one makes the lesson inapplicable) was added and checked on
   the validation collection only (known top-1 0.793 -> 0.914, wrong among answers 0.115 ->
   0.036, other classes in the match band 11 -> 7, the rest outside refusals); the one design
   choice made there was to keep account/partition pairs and a partition's MaxTime decisive
   (a fix for one pair is not a fix for another). Each collection's site is the real output
   of scontrol/sacctmgr on the harness configured as when the collection was made
   (`site/`, `context_corpus/capture_site.py`). **Third run (at 3c597a1)**: known top-1
   0.839, right lesson first 0.968, wrong among answers 0.000, other classes in the match band 0.

   Against issue 26's targets then: other classes' lessons in the match band 0 (met), known
   top-1 0.839 (target 0.95).
4. Four rules were then taken from the misses of the calibration part and the validation
   collection, both inspected case by case (calibration 3 misses -> 0, validation 5 misses and
   one other class in the match band -> 0 and 0): a fix that replaces the module version that
   failed serves other failing versions (`kb/recall/fixtokens.py`); two job outputs that end on
   one failure but began with different ones conflict (`fingerprint.failure_chain`, judged only
   when both carry a job's context); with the site's limits saying both jobs broke one limit,
   Slurm's different wordings for it are one cause (`scoring.without_rejection_wording`); the
   job's state is decisive for a failure that is Slurm's verdict on how it ended. On the public
   corpus's validation collection they changed nothing (its texts carry no job context).
   **Fourth run (at 4ef1b90)**: known top-1 0.903 (was 0.839), right lesson first 0.968, wrong
   among match-band answers 0.000, other classes in the match band 0.
5. A third collection (`data/corpus/context-fresh/`, below) was made by a session that did not
   read the recall code; its first run gave 0.929. Its misses, read after that run, gave four
   more rules (7fb0b4b: a job that began with the lesson's failure agrees; a module version the
   fix replaces counts nothing against it; a soft fact no longer rules out another program's
   sized fix when a decisive one agrees; another account/partition pair is another fix).
   **Fifth run (at 7fb0b4b)**: the same figures as the fourth: the three recurrences it misses
   are not of the kinds the three inspectable collections show.
6. A fourth collection (`data/corpus/context-fresh2/`, below; first run 0.950, 2 wrong
   answers) showed one more kind: amounts agreed within a tenth, so an OOM at 90M took the 100M
   lesson. Amounts now agree within 5 % (binary against decimal units). **Sixth run (the table
   above, at 6df5e79)**: the same figures again (known top-1 0.903).

Against issue 26's targets on this part: no other class's lesson in the match band (target 0) is
met; known top-1 0.903 is below the target 0.95 (28 of 31; the target needs 30). The recurrences
it misses are not answered with another lesson: two are shown first but only as related, one
behind another lesson that is itself only related (right lesson first, any band: 0.968).
""",
         "validation": """
This collection is inspected case by case (a second calibration set), so its figures are not
evidence on their own. Before the four rules of the held-out notes' fourth step (at fa2ed7c):
known top-1 0.914, wrong among match-band answers 0.036, other classes in the match band 7;
after them (4ef1b90) the table above. Text only moved from 0.431 to 0.466: the module-version
rule acts on the text.
"""}


NOTES["fresh"] = """
A third collection, made on 2026-12-05 after every rule of the table's commit existed, by a
session that did not read the recall code and did not run recall on it (its README): 63 real
failures, 21 classes (4 new), alice and bob, other amounts, request forms, programs and a
second look at every family of issue 26's corpus item. Classes it does not define are added as
competing lessons (the validation collection's, then the first collection's). **First run (the
table above, at fa9ed1a with the collection, before any of its texts was read)**: known top-1 0.929, right lesson
first 0.952, wrong among match-band answers 0.000, one other class's lesson in the match band
(a look-alike); text only 0.310, BM25 0.381. It is the one estimate of the context path on
material no rule was chosen on; after this run its texts are read like the calibration part's.
Its three misses and the look-alike were then read and gave four rules (7fb0b4b, see the
held-out notes' fifth step); **second run (at 7fb0b4b)**: 1.000, 0 other classes in the match
band - in-sample from then on, not evidence.
"""


NOTES["fresh2"] = """
A fourth collection, made on 2026-12-05 by another session that did not read the recall code
or run recall on it (its README): 60 real failures, 20 classes (5 new out-of-memory amounts),
mostly the Slurm families (out of memory at several requests and as srun steps, requests no
node has, time limits against cancellation and preemption, accounts and QOS). **First run (the
table above, at 3992565 with the collection, before any of its texts was read)**: known top-1
0.950, wrong among match-band answers 0.050 (2 of 40), other classes' lessons in the match band
4 (all look-alikes); text only 0.300, BM25 0.450. Its misses were then read: OOMs at 90M and
160M took the 100M and 150M lessons (amounts agreed within a tenth; now 5 %). **Second run (at
6df5e79)**: 1.000, no other class in the match band - in-sample from then on.
"""


def section_of(part: str) -> str:
    return COLLECTIONS[part][1] if part in COLLECTIONS else SECTION


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="heldout",
                        choices=("calibration", "heldout", *COLLECTIONS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="hpcmem-context-")
    os.environ["HPCMEM_HOME"] = tmp.name
    os.environ["HPCMEM_DISABLE_LOCAL_CONFIG"] = "1"
    classes, instances = load_part(args.part)
    config, stack, embedder, lesson_class, lesson_instance = build_store(classes, instances)
    store_site(config, stack, (COLLECTIONS[args.part][0] if args.part in COLLECTIONS else CORPUS) / "site")
    queries = [i for i in instances if i["split"] == args.part and i["id"] not in lesson_instance]
    rows = {
        "hpcmem, with context": metrics(hpcmem_run(config, stack, embedder, lesson_class, queries, with_context=True),
                                        classes),
        "hpcmem, text only (context withheld)": metrics(
            hpcmem_run(config, stack, embedder, lesson_class, queries, with_context=False), classes),
        "BM25 (raw text), ranking only": metrics(bm25_run(classes, instances, lesson_instance, queries), classes),
    }
    stack.dispose()
    seconds = time.perf_counter() - started
    body = render(args.part, rows, {"classes": len(classes)}, seconds)
    print(body)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.write:
        from markdown_section import write_section

        write_section(args.write, section_of(args.part), body)


if __name__ == "__main__":
    main()
