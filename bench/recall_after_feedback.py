"""Do lessons learn their variants? Recall before and after one confirmation per lesson.

    .venv/bin/python bench/recall_after_feedback.py [--part calibration|heldout] [--write docs/benchmarks.md]

The quality benchmark (bench_recall_quality.py) measures a cold store: each lesson knows
only the instance it was recorded from. In use, a lesson that fixed a recurrence is
confirmed (``hpcmem feedback --worked`` with the error), and the recurrence's fingerprint
becomes an alias. Here every known class with two or more recurrences has its first
recurrence (by id) confirmed through ``kb.lessons.evidence.feedback``, as a user would; then the
other recurrences and every no-lesson query are recalled, in the same store, before and
after the confirmations. The confirmed recurrences are left out of both. Nothing is chosen
from this run: it measures the learning loop with the shipped scorer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from markdown_section import write_section  # noqa: E402
from recall_corpus import Plan, plan  # noqa: E402

SECTION = "## Recall after one confirmation per lesson"


def confirmed_first(target: Plan) -> dict[str, str]:
    """class -> id of the recurrence that gets confirmed (classes with 2+ recurrences)."""
    by_class: dict[str, list[str]] = {}
    for q in sorted(target.recurrences, key=lambda q: q.id):
        by_class.setdefault(q.cls, []).append(q.id)
    return {cls: ids[0] for cls, ids in by_class.items() if len(ids) >= 2}


def run(part: str) -> dict:
    from recall_methods import HpcmemStore

    from hpcmem.kb.lessons.evidence import feedback

    target = plan(part)
    confirm = confirmed_first(target)
    held_back = set(confirm.values())
    rest = Plan(part, target.lessons, [q for q in target.recurrences if q.id not in held_back], target.no_lesson)
    store = HpcmemStore(target)
    lesson_of = {cls: lid for lid, cls in store.lesson_class.items()}
    out: dict = {"part": part, "lessons": len(target.lessons), "confirmed": len(confirm),
                 "recurrences": len(rest.recurrences), "no_lesson": len(rest.no_lesson)}
    try:
        out["before"] = judged(store, rest)
        texts = {q.id: q.text for q in target.recurrences}
        t0 = time.perf_counter()
        for cls, qid in confirm.items():
            feedback(store.stack, lesson_of[cls], worked=True, actor="bench", error_text=texts[qid])
        out["feedback_s"] = round(time.perf_counter() - t0, 2)
        out["after"] = judged(store, rest)
    finally:
        store.close()
    return out


def judged(store, target: Plan) -> dict:
    from bench_recall_quality import applied_and_shown, summarise
    from recall_methods import hpcmem_answers

    answers = hpcmem_answers(store, target.queries, allow_model=True)
    answered, ranked = applied_and_shown(answers)
    exact = sum(1 for q in target.recurrences if answers[q.id]["stages"] == ["exact"])
    return summarise(target, answered, ranked) | {"answered_at_exact_stage": round(exact / len(target.recurrences), 4)}


def markdown(r: dict) -> str:
    rows = [("cold store (lessons only)", r["before"]), ("after one confirmation per lesson", r["after"])]
    lines = [
        SECTION, "",
        f"`bench/recall_after_feedback.py --part {r['part']}`: {r['lessons']} lessons; {r['confirmed']} of them "
        "have their first recurrence confirmed with `feedback --worked` and the error (its fingerprint becomes an "
        f"alias); recalled before and after, in the same store: the other {r['recurrences']} recurrences and "
        f"{r['no_lesson']} no-lesson queries (the confirmed recurrences are left out of both). The shipped scorer; "
        "nothing is chosen from this run.", "",
        "| store | known top-1 | MRR@5 | abstention (no lesson) | decision accuracy | recurrences answered at the exact stage |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, s in rows:
        lines.append(f"| {label} | {s['known_top1']:.3f} | {s['mrr5']:.3f} | {s['abstention']:.3f} | "
                     f"{s['decision_accuracy']:.3f} | {s['answered_at_exact_stage']:.3f} |")
    lines += ["", f"The {r['confirmed']} confirmations took {r['feedback_s']} s. Reproduce: "
              f"`.venv/bin/python bench/recall_after_feedback.py --part {r['part']} --write docs/benchmarks.md`.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("calibration", "heldout"), default="calibration")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write", type=Path, help="replace this section of the markdown file")
    args = ap.parse_args()
    result = run(args.part)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    if args.write:
        write_section(args.write, SECTION, markdown(result))


if __name__ == "__main__":
    main()
