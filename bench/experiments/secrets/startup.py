"""Start-up cost in fresh processes (median of N): import + rule loading + one short
redaction (what `hpcmem recall` would add), against a bare interpreter."""
import json, statistics, subprocess, sys, time
from pathlib import Path
PY = sys.executable
HERE = Path(__file__).parent
SHORT = "RuntimeError: CUDA error: out of memory; export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
CASES = {
 "bare python": "pass",
 "import today's redact.py + 1 redaction": f"import sys; sys.path.insert(0,'{HERE}'); import candidates as C; c=C.Current(); c.load(); c.redact({SHORT!r})",
 "proposal fused(pyahocorasick), warm JSON cache, 1 redaction": f"import sys; sys.path.insert(0,'{HERE}'); import proposal as P; f=P.Fused('f','pyahocorasick'); f.load(); f.redact({SHORT!r})",
 "proposal fused(ahocorasick_rs), warm cache, 1 redaction": f"import sys; sys.path.insert(0,'{HERE}'); import proposal as P; f=P.Fused('f','ahocorasick_rs'); f.load(); f.redact({SHORT!r})",
 "proposal fused(trie pure-Python), warm cache, 1 redaction": f"import sys; sys.path.insert(0,'{HERE}'); import proposal as P; f=P.Fused('f','trie'); f.load(); f.redact({SHORT!r})",
 "proposal fused(pyahocorasick), COLD (rules extracted from the binary)": f"import os,sys,tempfile; os.environ['PROTO_CACHE']=tempfile.gettempdir()+'/cold-'+str(os.getpid())+'.json'; sys.path.insert(0,'{HERE}'); import proposal as P; f=P.Fused('f','pyahocorasick'); f.load(); f.redact({SHORT!r}); os.unlink(os.environ['PROTO_CACHE'])",
 "import ahocorasick (pyahocorasick)": "import ahocorasick",
 "import ahocorasick_rs": "import ahocorasick_rs",
 "import yaml": "import yaml",
 "detect-secrets: import + settings + 1 scan_line": f"from detect_secrets.core.scan import scan_line; from detect_secrets.settings import default_settings\nwith default_settings(): list(scan_line({SHORT!r}))",
 "credsweeper: import + CredSweeper(ml_threshold=0) + 1 scan": f"import logging; from credsweeper import CredSweeper, StringContentProvider; cs=CredSweeper(ml_threshold=0, log_level='CRITICAL'); cs.file_scan(StringContentProvider(lines=[{SHORT!r}], file_path='x.log'))",
}
N = int(sys.argv[1]) if len(sys.argv) > 1 else 9
out = {}
for name, code in CASES.items():
    ts = []
    for _ in range(N):
        t = time.perf_counter()
        subprocess.run([PY, "-W", "ignore", "-c", code], check=True, stdout=subprocess.DEVNULL)
        ts.append(time.perf_counter() - t)
    out[name] = round(statistics.median(ts), 3)
base = out["bare python"]
for k, v in out.items():
    print(f"{k:72s} {v:6.3f} s  (+{v - base:.3f})")
r = json.loads((HERE / "results.json").read_text()); r["_startup"] = out
(HERE / "results.json").write_text(json.dumps(r, indent=1))
