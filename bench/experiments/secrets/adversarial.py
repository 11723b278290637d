"""Long pathological lines: Python's backtracking `re` is not RE2 (linear). Time per line."""
import sys, time
sys.path.insert(0, '.'); sys.path.insert(0, 'proto')
import proposal as P, candidates as C
cases = {
    "curl + 40k spaced words": "curl " + "x " * 20000 + "-H",
    "curl -u + 100k": "curl " + "-u " * 30000,
    "password: 100k letters": "password: " + "a" * 100000,
    "100k token chars": "x" * 100000,
    "eyJ + 100k": "eyJ" + "A" * 100000,
    "key= x 20k": "key=" * 20000,
    "url 50k:50k": "https://" + "a" * 50000 + ":" + "b" * 50000,
    "access_token x 10k": "access_token " * 10000,
    "-----BEGIN PRIVATE KEY----- + 50k lines": "-----BEGIN RSA PRIVATE KEY-----\n" + "QUJD\n" * 50000,
    "sk- x 20k": "sk-" * 20000,
    "hooks.slack.com + 100k": "hooks.slack.com/services/" + "A" * 100000,
}
today = C.Current(); today.load()
f = P.Fused("f", "ahocorasick_rs"); f.load()
for name, text in cases.items():
    row = [name.ljust(42)]
    for label, fn in (("today", today.redact), ("proposal", f.redact)):
        t = time.perf_counter(); fn(text); row.append(f"{label} {time.perf_counter() - t:7.3f}s")
    print("  ".join(row), flush=True)
