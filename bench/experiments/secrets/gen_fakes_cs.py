"""Independent shapes: one fake per credsweeper token-format rule (its rules/config.yaml,
`pattern` rules with a `value` group, no ML), placed on the same four job-log lines.

    venv/bin/python gen_fakes_cs.py   # writes fakes_cs.jsonl

These shapes are not gitleaks': they test a gitleaks-based design on formats it was not
built from (tokens gitleaks 8.30.1 has no rule for show up as misses)."""
import importlib.util, json, random, re, sys
from pathlib import Path
import yaml
sys.path.insert(0, str(Path(__file__).parent))
import gen_fakes as G
HERE = Path(__file__).parent
spec = importlib.util.find_spec("credsweeper")
rules = yaml.safe_load((Path(spec.submodule_search_locations[0]) / "rules" / "config.yaml").read_text())
rng = random.Random(33)
items, failed = [], []
for d in rules:
    if d["type"] != "pattern" or d.get("use_ml") or "code" not in d["target"] or d["confidence"] == "weak":
        continue
    for vi, v in enumerate(d["values"]):
        rx = re.compile(v)
        if "value" not in rx.groupindex:
            continue
        sg = rx.groupindex["value"]
        got = None
        for _ in range(300):
            gen = G.Generator(rng, sg)
            try:
                out, span = gen.run(v, 0)
            except Exception as e:
                break
            if span is None:
                continue
            text = "".join(c for c, _ in out)
            secret = "".join(c for c, _ in out[span[0]:span[1]])
            mask = "".join("1" if r else "0" for _, r in out[span[0]:span[1]])
            m = rx.search(" " + secret + " ")
            if m and m.group("value") == secret and mask.count("1") >= 8 and G.glrules.entropy(secret) > 3:
                got = (secret, mask)
                break
        if not got:
            failed.append(d["name"])
            continue
        secret, mask = got
        rid = re.sub(r"[^a-z0-9]+", "-", d["name"].lower()).strip("-") + (f"-{vi}" if vi else "")
        rule = type("R", (), {"id": rid})
        for ctx, text in G.token_lines(rule, secret).items():
            items.append({"id": f"cs:{rid}:{ctx}", "family": "credsweeper_shape", "rule": rid, "context": ctx,
                          "text": text, "secret": secret, "mask": mask, "gitleaks": None, "gitleaks_rules": []})
G.gitleaks_oracle(items)
with open(HERE / "fakes_cs.jsonl", "w") as fh:
    for it in items:
        fh.write(json.dumps(it) + "\n")
print(len(items), "items,", len({i["rule"] for i in items}), "shapes; failed:", failed, file=sys.stderr)
