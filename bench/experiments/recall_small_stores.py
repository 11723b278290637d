"""Recall with the small stores real users have (1-5 lessons): the corpus's calibration part only.

    .venv/bin/python bench/experiments/recall_small_stores.py [--foreign 40] [--stores 30] [--write docs/benchmarks.md]

The recall scorer was fitted and judged with stores holding every known calibration lesson
(64); a user's store often holds one to five. Here, over the calibration part only:

- k=1: for each known class, a fresh store holding only that class's lesson (recorded as
  ``recall_methods.HpcmemStore`` records it, from the class's first instance);
- k=3, k=5: ``--stores`` fresh stores of k lessons drawn at random (fixed seed).

Each store is asked (a) every recurrence of its classes (own: the right lesson must be the
answer, i.e. first and in the match band) and (b) a fixed-seed sample of ``--foreign`` other
calibration queries: recurrences of classes whose lesson is not in this store, and
no-lesson instances (foreign: recall must abstain, the store has no lesson for them).
Both with the shipped model and with ``--no-model`` (lexical). A foreign query answered with
a lesson whose category (recall's category of the query vs the lesson's) differs is counted
apart: the failure bf13f49 was made for.

The held-out part is never loaded.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/: the corpus, methods and fit it reuses
sys.path.insert(0, str(HERE))

from recall_corpus import SEED, Plan, plan  # noqa: E402

SECTION = "## Recall with small stores (calibration)"
METHODS = (("hpcmem (model)", True), ("hpcmem --no-model", False))


@dataclass
class Tally:
    own: int = 0
    own_right: int = 0
    own_abstained: int = 0
    own_wrong: int = 0  # answered with another lesson of the store
    foreign: int = 0
    foreign_abstained: int = 0
    foreign_other_category: int = 0  # answered with a lesson of another category
    foreign_kinds: Counter = field(default_factory=Counter)  # (kind of query, match kind, same category?)
    category_pairs: Counter = field(default_factory=Counter)  # (query category, lesson category) of wrong answers
    own_miss_kinds: Counter = field(default_factory=Counter)  # how own recurrences were missed

    def row(self) -> dict:
        n = self.own + self.foreign
        return {
            "own": self.own, "foreign": self.foreign,
            "own_right": self.own_right / self.own if self.own else 0.0,
            "own_abstained": self.own_abstained / self.own if self.own else 0.0,
            "foreign_abstained": self.foreign_abstained / self.foreign if self.foreign else 0.0,
            "foreign_other_category": self.foreign_other_category,
            "decision_accuracy": (self.own_right + self.foreign_abstained) / n if n else 0.0,
        }


def lesson_categories(cal: Plan) -> dict[str, str]:
    """class -> the category recall gives its recorded lesson (as kb.lessons.from_error computes it)."""
    from hpcmem.kb.safety.redact import redact_text
    from hpcmem.kb.signatures.rules_digest import active_rules
    from hpcmem.kb.signatures.fingerprint import fingerprint

    rules = active_rules()
    return {cls.name: fingerprint(redact_text(inst.text), rules).category for inst, cls in cal.lessons}


def answers(store, queries, *, allow_model: bool) -> dict[str, dict]:
    """Like recall_methods.hpcmem_answers, keeping each shown lesson's match kind too."""
    from hpcmem.kb.recall.recaller import RecallQuery

    recaller = store.recaller(allow_model=allow_model)
    out = {}
    try:
        for q in queries:
            result = recaller.recall(RecallQuery(text=q.text, limit=5))
            ranked = [(store.lesson_class[m["lesson_id"]], m["probability"], m["band"], m["match_kind"])
                      for m in result["matches"]]
            out[q.id] = {"ranked": ranked, "category": result["query"]["category"]}
    finally:
        recaller.close()
    return out


def judge(tally: Tally, own, foreign, got: dict[str, dict], known: set[str], category: dict[str, str]) -> None:
    for q in own:
        a = got[q.id]
        top = a["ranked"][0] if a["ranked"] else None
        answer = top[0] if top is not None and top[2] == "match" else None
        tally.own += 1
        if answer == q.cls:
            tally.own_right += 1
        elif answer is None:
            tally.own_abstained += 1
            tally.own_miss_kinds["abstained, own lesson shown as related" if any(
                c == q.cls and b == "related" for c, _, b, _ in a["ranked"]) else "abstained, own lesson not shown"] += 1
        else:
            tally.own_wrong += 1
            tally.own_miss_kinds["answered with another lesson of the store"] += 1
    for q in foreign:
        a = got[q.id]
        top = a["ranked"][0] if a["ranked"] else None
        tally.foreign += 1
        if top is None or top[2] != "match":
            tally.foreign_abstained += 1
            continue
        same = category[top[0]] == a["category"]
        if not same:
            tally.foreign_other_category += 1
        kind = "recurrence of a class not in the store" if q.cls in known else "no-lesson instance"
        tally.foreign_kinds[(kind, top[3], "same category" if same else "other category")] += 1
        tally.category_pairs[(a["category"], category[top[0]])] += 1


def stores_for(cal: Plan, k: int, n_stores: int) -> list[list[int]]:
    if k == 1:
        return [[i] for i in range(len(cal.lessons))]
    rng = random.Random(f"{SEED}-small-stores-{k}")
    return [sorted(rng.sample(range(len(cal.lessons)), k)) for _ in range(n_stores)]


def run(ks: tuple[int, ...], n_foreign: int, n_stores: int, model: str | None = None) -> dict:
    """``model``: another recall_model.json than the shipped one."""
    from recall_methods import HpcmemStore

    cal = plan("calibration")
    known = {cls.name for _, cls in cal.lessons}
    category = lesson_categories(cal)
    results: dict[tuple[int, str], Tally] = {}
    sizes: dict[int, dict] = {}
    for k in ks:
        tallies = {name: Tally() for name, _ in METHODS}
        stores = stores_for(cal, k, n_stores)
        for s, picks in enumerate(stores):
            lessons = [cal.lessons[i] for i in picks]
            names = {cls.name for _, cls in lessons}
            own = [q for q in cal.recurrences if q.cls in names]
            others = [q for q in cal.queries if q.cls not in names]
            rng = random.Random(f"{SEED}-small-stores-foreign-{k}-{s}")
            foreign = sorted(rng.sample(others, min(n_foreign, len(others))), key=lambda q: q.id)
            store = HpcmemStore(Plan("calibration", lessons=lessons), model_path=model)
            try:
                # --no-model first: once the model has run, the store caches the query vectors
                # and recall without the model would use them (as bench_recall_quality.py does).
                for name, allow in sorted(METHODS, key=lambda m: m[1]):
                    got = answers(store, own + foreign, allow_model=allow)
                    judge(tallies[name], own, foreign, got, known, category)
            finally:
                store.close()
        for name, _ in METHODS:
            results[(k, name)] = tallies[name]
        sizes[k] = {"stores": len(stores), "own": tallies[METHODS[0][0]].own, "foreign": tallies[METHODS[0][0]].foreign}
    return {"results": results, "sizes": sizes, "calibration": (len(cal.lessons), len(cal.recurrences), len(cal.no_lesson))}


def markdown(out: dict, n_foreign: int, n_stores: int, seconds: float) -> str:
    lessons, rec, none = out["calibration"]
    lines = [
        SECTION, "",
        "`bench/experiments/recall_small_stores.py`, calibration part of data/corpus/ only (held-out never loaded). "
        f"The calibration part has {lessons} known classes (one lesson each), {rec} recurrences and "
        f"{none} no-lesson instances. k=1: one fresh store per known class, holding only its lesson; "
        f"k=3 and k=5: {n_stores} fresh stores of k lessons drawn with a fixed seed. Own: every recurrence of "
        "the store's classes (right = that lesson first and in the match band). Foreign: a fixed-seed sample "
        f"of {n_foreign} other calibration queries per store (recurrences of classes not in the store, and "
        "no-lesson instances), which must be abstained on. Decision accuracy is over own and foreign "
        "together (so it depends on the sample's mix). \"Other category\": foreign queries answered with "
        "a lesson whose category differs from recall's category of the query.",
        "",
        "| k | method | stores | own recurrences | right lesson | abstained on own | foreign queries | "
        "foreign abstained | decision accuracy | foreign answered, other category |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (k, name), t in out["results"].items():
        r, size = t.row(), out["sizes"][k]
        lines.append(f"| {k} | {name} | {size['stores']} | {r['own']} | {r['own_right']:.3f} | "
                     f"{r['own_abstained']:.3f} | {r['foreign']} | {r['foreign_abstained']:.3f} | "
                     f"{r['decision_accuracy']:.3f} | {r['foreign_other_category']} |")
    lines += ["", "How the errors fell (all k together):", ""]
    for name, _ in METHODS:
        own_miss, kinds, pairs = Counter(), Counter(), Counter()
        for (k, n), t in out["results"].items():
            if n == name:
                own_miss += t.own_miss_kinds
                kinds += t.foreign_kinds
                pairs += t.category_pairs
        lines.append(f"- {name}: own recurrences missed: "
                     + (", ".join(f"{v} {key}" for key, v in own_miss.most_common()) or "none")
                     + "; foreign answered: "
                     + (", ".join(f"{v} {a} ({m}, {c})" for (a, m, c), v in kinds.most_common()) or "none")
                     + "; most frequent (query category -> lesson category) of those: "
                     + (", ".join(f"{q} -> {l} ({v})" for (q, l), v in pairs.most_common(4)) or "none") + ".")
    lines += ["", f"Runtime {seconds:.0f} s (one process, model loaded once).", "",
              "Reproduce: `.venv/bin/python bench/experiments/recall_small_stores.py --write docs/benchmarks.md`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--foreign", type=int, default=40, help="foreign queries sampled per store")
    ap.add_argument("--stores", type=int, default=30, help="stores for k=3 and k=5")
    ap.add_argument("--write", type=Path, help="replace the section in this markdown file")
    ap.add_argument("--model", help="another recall_model.json than the shipped one (not with --write)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    if args.model and args.write:
        ap.error("--write documents the shipped model: leave out --model")
    out = run((1, 3, 5), args.foreign, args.stores, args.model)
    seconds = time.monotonic() - start
    for k, size in out["sizes"].items():
        print(f"k={k}: {size['stores']} stores, {size['own']} own recurrences, {size['foreign']} foreign queries "
              "(per method)", file=sys.stderr)
    text = markdown(out, args.foreign, args.stores, seconds)
    print(text)
    if args.write:
        from markdown_section import write_section

        write_section(args.write, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
