"""PROTOTYPE (research copy of kb/safety/redact.py as of 7ecb60b with issue-32 fixes; not the project file).

Remove credentials from log text before it is stored, shown or shared.

Job logs echo environments, configs and command lines, so failure excerpts can carry
tokens and passwords. ``redact`` replaces each secret with ``[REDACTED:<kind>]`` and
keeps the text around it, so the failure stays readable::

    >>> redact_text("export HF_TOKEN=hf_" + "Ab1" * 12)
    'export HF_TOKEN=[REDACTED:huggingface_token]'

What counts as a secret (the kinds, in the order the rules run):

- ``private_key``: ``-----BEGIN ... PRIVATE KEY-----`` through its END line (RSA, EC,
  OPENSSH, ENCRYPTED...); a block cut off before END still loses its base64 lines;
- ``url_credentials``: the password of ``https://user:pw@host``, ``postgresql://u:pw@h/db``
  (user and host stay);
- tokens recognised by their shape: ``aws_access_key_id`` (``AKIA``/``ASIA`` + 16),
  ``gcp_api_key`` (``AIza``), ``azure_key`` (``AccountKey=``, ``SharedAccessKey=``, SAS
  ``sig=``), ``github_token`` (``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``), ``gitlab_token``
  (``glpat-`` ...), ``huggingface_token`` (``hf_``), ``anthropic_key`` (``sk-ant-``),
  ``openai_key`` (``sk-``, ``sk-proj-``), ``slack_token`` (``xoxb-`` ...), ``slack_webhook``
  (the path after ``hooks.slack.com/``), ``stripe_key`` (``sk_live_``, ``rk_live_``,
  ``sk_test_``), ``jwt`` (``eyJ...eyJ...sig``), ``bearer_token`` (after ``Authorization:``,
  or after ``Bearer`` when it looks random);
- ``aws_secret_key``: 40 characters after ``aws_secret_access_key =``/``:``;
- ``cli_password``: ``--password X``, ``--password=X``, ``--db-password ...``, mysql/mariadb
  ``-pX``/``-p'X'``, ``sshpass -p X``, ``curl -u user:X``; ``cli_token``: a random-looking
  value after ``--token``, ``--hf-token``, ``--api-key``, ``--secret`` ...;
- ``secret_assignment``: assignments whose key names a secret, in shell, YAML, INI, JSON
  or Python-repr form (``HF_TOKEN=...``, ``api_key: ...``, ``"password": "..."``,
  ``{'secret': '...'}``). The key's *last* word decides: ``...password``, ``passwd``,
  ``passphrase`` (also ``PGPASSWORD``), ``*_pass`` and ``*_pwd`` (``MYSQL_PWD``) redact
  any real value; ``...token``, ``secret``, ``*_key``, ``credentials`` (and ``apiKey``,
  ``accessToken``...) only a value that looks random: 8+ characters of a token alphabet
  with letters and digits, or 16+ characters of high entropy.

What is deliberately *not* a secret (documented decisions):

- bare hex strings: a 40-hex git SHA, a sha256 digest or a UUID is an identifier, not a
  credential. High-entropy detection runs only in assignment context, so
  ``WANDB_API_KEY=<40 hex>`` is redacted but a commit id in a log line is not;
- keys whose last word is not a secret word: ``password_file=/etc/x``, ``--password-file``,
  ``token_type``, ``eos_token_id=2``, ``max_new_tokens=512``, ``TOKENIZERS_PARALLELISM``;
- placeholder values: empty, ``None``/``null``/``nil``, yes/no/true/false (mysql's
  ``(using password: YES)``), ``***``, ``<...>``, ``$VAR``, ``${VAR}``, and values that
  are already ``[REDACTED:...]`` (so redacting twice changes nothing);
- for token/key words, paths (``SSH_KEY=~/.ssh/id_ed25519``) and plain words
  (``sort_key=name``); ``--mem=4G`` and ``sbatch -p gpu`` never match (``-p`` is a
  password flag only after mysql/mariadb/sshpass; mysql's ``-P`` is the port);
- AWS ids other than access keys (``AIDA`` user, ``AROA`` role ids) name principals.

Why a pattern table and not a detector library. ``detect-secrets`` 1.5.0 (on PyPI here)
was measured on the same mixed job-log text (sample logs, Loghub messages, training and
solver noise), line by line through ``scan_line`` with its default plugins: 0.4-0.5 MB/s,
and it flagged 19,857 of 20,457 lines (97 %), nearly all as "Base64/Hex High Entropy
String" - log lines are full of hashes, addresses and ids. It only reports findings, so
replacing them would need a second pass, and it pulls in PyYAML and requests. The ingest
path redacts every excerpt and needs >= 20 MB/s. This module, standard library only,
measures on that text (``.venv/bin/python bench/bench_logscan.py --redact-only``, 2 cores,
Python 3.11): 54 MB/s on one 20 MB string, 60 MB/s in 4 KiB chunks, 45 MB/s line by
line; figures in docs/benchmarks.md ("Log scanning"). The rules above are the documented
contract; each has tests with fake keys and with look-alikes that must stay.

Speed comes from guards: every rule names strings that any match contains, and its regex
runs only on the lines holding one (or, for patterns that start with a literal, over the
text, where sre finds the literal as fast as ``str.find``). Long text is processed in
line-aligned pieces of 4 KiB after private-key blocks, and a single search for any guard
lets clean pieces through untouched.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

__all__ = ["Redacted", "redact", "redact_text", "KINDS"]

MARK = "[REDACTED:{}]"
_ALREADY = "[REDACTED:"
_MARKER = re.compile(r"\[REDACTED:[^\]\s]*\]")


@dataclass(frozen=True)
class Redacted:
    """Result of :func:`redact`: the clean text, how many secrets were replaced and
    their kinds (each kind once, in rule order)."""

    text: str
    count: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    # Every match contains one of these strings. The regex runs only on the lines that
    # contain one (a fast substring search), so clean text costs almost nothing.
    guards: tuple[str, ...]
    # Optional check on the match; returning False keeps the text unchanged.
    accept: Callable[[re.Match[str]], bool] | None = None
    # Where the regex runs in a long text: "lines" with a guard; "whole" text (patterns
    # that start with a literal, which sre finds as fast as str.find, and multi-line
    # ones); "at_guard": matched at each guard occurrence (the pattern starts with the
    # guard word, and the words are too common for the line search to pay off).
    scope: str = "lines"


# A value as it appears after `=` or `:` in a command line or config: quoted or bare.
_VALUE = r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s'"]+)"""

_PRIVATE_KEY = (
    r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]{0,20000}?-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    # No END line (the excerpt was cut): take the header and base64 lines that follow.
    r"|(?:[ \t\r]*\n[ \t\r\n]*(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment):[^\n]*)[ \t\r]*(?=\n|$))+)"
)

# Key words that make an assignment a secret; see the module docstring.
_PASSWORD_WORD = re.compile(r"(?:password|passwd|passphrase)$|(?:^|_)pass$|._pwd$")
_TOKEN_WORD = re.compile(
    r"(?:token|secret)$|(?:^|_)(?:key|credentials?)$"
    r"|(?:api|secret|access|private|auth|master|signing|client|account|encryption)key$"
)
# The assignment regex starts at the key's last word (fast to search); the rest of the
# key name is read backwards in `_assignment_key`.
_ASSIGNMENT = (
    r"(?i)(?:pass(?:word|wd|phrase)?|pwd|token|secret|key|credentials?)"
    r"""(?P<q>["']?)[ \t]*(?:=>|[:=])[ \t]*(?P<s>"[^"\n]*"|'[^'\n]*'|[^\s'",;&}\]\)]+)"""
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_PLACEHOLDER = re.compile(
    r"(?i)^(?:|none|null|nil|undefined|yes|no|true|false|on|off|\*+|x{3,}|<[^>]*>|\$\w+|\$\{[^}]*\}"
    r"|%\(\w+\)s|\{\{[^}]*\}\})$"
)
_TOKEN_ALPHABET = re.compile(r"^[A-Za-z0-9+/=_\-.~:]+$")


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_random(value: str) -> bool:
    """A token-like value: not a path or a word, but a run of token characters."""
    if len(value) < 8 or not _TOKEN_ALPHABET.match(value) or value[0] in "/~.":
        return False
    if value.isdigit() or value.lower() in ("true", "false"):
        return False
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return (has_letter and has_digit) or (len(value) >= 16 and _entropy(value) >= 3.5)


def _assignment_key(m: re.Match[str]) -> str:
    """The whole key name ending where the match starts (`HF_TOKEN` for `TOKEN=`)."""
    text, start = m.string, m.start()
    begin = start
    while begin > 0 and start - begin < 64 and text[begin - 1] in _KEY_CHARS:
        begin -= 1
    key = text[begin : m.start("q")]
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)  # apiKey -> api_Key
    return re.sub(r"[.\-]+", "_", key).lower()


_CODE_REF = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(.*)?$|^(?:os\.)?(?:getenv|environ)\b")
_PATHLIKE = re.compile(r"^[\w.\-]+(?:/[\w.\-]+)+/?$")
_PUBKEY_TYPE = re.compile(r"^(?:ssh-(?:rsa|dss|ed25519)|ecdsa-sha2-\w+|sk-(?:ssh|ecdsa)-\S+)$")
_HEXISH = re.compile(r"^(?:[0-9a-fA-F]+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
# `<qualifier>_key` names whose hex value is a credential; other *_key names (cache_key,
# sort_key, primary_key, partition_key...) with a hex or uuid value name a thing.
_SECRET_QUALIFIER = re.compile(
    r"(?:^|_)(?:api|secret|access|private|auth|master|signing|client|account|encryption|service|app|license"
    r"|subscription|storage|shared|session|admin|deploy|wandb|hf|openai|aws|gcp|azure)_?key$")


def _accept_assignment(m: re.Match[str]) -> bool:
    raw = m.group("s")
    value = _unquote(raw)
    if value.startswith(_ALREADY) or _PLACEHOLDER.match(value):
        return False
    if raw[:1] in "([{":  # a tuple, list or dict follows, not a value
        return False
    key = _assignment_key(m)
    if _CODE_REF.match(value) and raw[:1] not in "\"'":  # api_key=settings.openai_api_key
        return False
    if _PASSWORD_WORD.search(key):  # (PWD and OLDPWD, the shell's directories, do not match)
        if key in ("pass", "passwd") and m.group(0).find(":") >= 0 and value.isalpha():
            return False  # "passwd: Authentication token ...", "did not pass: 9 passed"
        if key == "pass" and value.isdigit():
            return False
        return True
    if _TOKEN_WORD.search(key):
        if key.endswith(("public_key", "pubkey", "publickey")) or _PUBKEY_TYPE.match(value):
            return False
        if _PATHLIKE.match(value) and "." in value.rsplit("/", 1)[-1]:
            return False  # Key='ckpt/epoch7/model.pt'
        if key.endswith("key") and _HEXISH.match(value) and not _SECRET_QUALIFIER.search(key):
            return False  # cache_key=<hex>
        return _looks_random(value)
    return False


def _accept_value(m: re.Match[str]) -> bool:
    start, end = _secret_span(m)
    raw = m.string[start:end]
    value = _unquote(raw)
    if raw.startswith("-"):  # `--password -h db01`: the next flag, not a password
        return False
    return not value.startswith(_ALREADY) and not _PLACEHOLDER.match(value)


def _accept_netrc(m: re.Match[str]) -> bool:
    text = m.string
    line_start = text.rfind("\n", 0, m.start()) + 1
    before = text[line_start : m.start()]
    if m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_"):
        return False
    if before.strip() and not re.search(r"\b(?:machine|login|default)\b", before):
        return False
    return _accept_value(m)


def _accept_url(m: re.Match[str]) -> bool:
    """user:pw@host, but not image:tag@sha256:digest (docker://ubuntu:22.04@sha256:...)."""
    if m.string.startswith(("sha256:", "sha512:", "sha384:"), m.end()):
        return False
    return _accept_value(m)


def _accept_url_token(m: re.Match[str]) -> bool:
    if m.string.startswith(("sha256:", "sha512:"), m.end()):
        return False
    value = m.group("s")
    # a token mixes letters and digits (akka.tcp://sparkExecutorActorSystem@host is a name)
    return (_accept_random(m) and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


def _accept_random(m: re.Match[str]) -> bool:
    start, end = _secret_span(m)
    return _looks_random(_unquote(m.string[start:end]))


def _rule(kind: str, pattern: str, guards: tuple[str, ...], *, fold: bool = False,
          accept: Callable[[re.Match[str]], bool] | None = None, scope: str = "lines") -> _Rule:
    if fold:  # case-insensitive guard words: look for the spellings people use
        guards = tuple(dict.fromkeys(v for g in guards for v in (g, g.upper(), g.capitalize())))
    return _Rule(kind, re.compile(pattern), guards, accept, scope)


# Order matters: specific shapes first, so `GITHUB_TOKEN=ghp_...` is reported as a GitHub
# token, and the generic assignment rule last (it skips values already redacted).
_RULES: tuple[_Rule, ...] = (
    _rule("private_key", _PRIVATE_KEY, ("PRIVATE KEY",), scope="whole"),
    # user:pw@ and :pw@ (an empty user, redis://:pw@host)
    _rule("url_credentials",
          r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/?#@'\"]{0,128}:(?P<s>[^\s@/'\"]{1,256})@",
          ("://",), accept=_accept_url),
    # a token as the user: https://<token>@gitlab.example.org/group/repo.git
    _rule("url_credentials",
          r"\b[A-Za-z][A-Za-z0-9+.\-]{1,20}://(?P<s>[A-Za-z0-9_\-.~]{16,256})@",
          ("://",), accept=_accept_url_token),
    # pre-signed object-store URLs: the signature and session token grant access
    _rule("presigned_url",
          r"[?&](?i:X-Amz-Security-Token|X-Amz-Signature|X-Goog-Signature|X-Goog-Credential|Signature)"
          r"=(?P<s>[^&\s'\"#]{16,})",
          ("X-Amz-", "x-amz-", "X-Goog-", "x-goog-", "Signature=")),
    _rule("private_key", r"\bclient-key-data:[ \t]*(?P<s>[A-Za-z0-9+/=]{16,})", ("client-key-data",)),
    _rule("private_key",
          r"\bPrivate-Lines:[ \t]*\d+[ \t\r]*\n(?P<s>(?:[ \t]*[A-Za-z0-9+/=]{4,}[ \t\r]*(?:\n|$))+)"
          r"|\bPrivate-MAC:[ \t]*(?P<s2>[0-9a-fA-F]{16,})",
          ("Private-Lines:", "Private-MAC:"), scope="whole"),
    # AKIA: long-term access key, ASIA: temporary one. Other AWS prefixes (AIDA user,
    # AROA role...) name principals; they are identifiers, not credentials.
    _rule("aws_access_key_id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", ("AKIA", "ASIA")),
    _rule("gcp_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])", ("AIza",)),
    _rule("azure_key",
          r"(?:\b(?:AccountKey|SharedAccessKey)=|[?&]sig=)(?P<s>[A-Za-z0-9%+/=]{16,})",
          ("AccountKey=", "SharedAccessKey=", "sig=")),
    # Patterns starting with a literal run on the whole text; the look-behind after the
    # literal stands in for a leading \b, which would hide the literal from sre.
    _rule("github_token", r"gh(?<![A-Za-z0-9_]gh)[pousr]_[A-Za-z0-9]{36,251}\b",
          ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), scope="whole"),
    _rule("github_token", r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,247}\b",
          ("github_pat_",), scope="whole"),
    _rule("gitlab_token",
          r"gl(?<![A-Za-z0-9_]gl)(?:pat|dt|rt|ptt|cbt|oas|ft|imt|soat)-[A-Za-z0-9_\-]{20,}",
          ("gl",), scope="whole"),
    _rule("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}\b", ("hf_",)),
    _rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",)),
    _rule("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}", ("sk-",)),
    _rule("slack_token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", ("xox",)),
    _rule("slack_webhook",
          r"(?<=hooks\.slack\.com/)(?P<s>(?:services|workflows|triggers)/[A-Za-z0-9/_\-]+)",
          ("hooks.slack.com/",)),
    _rule("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", ("_live_", "_test_")),
    _rule("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*", ("eyJ",)),
    _rule("bearer_token",
          r"(?i)\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|token|basic)[ \t]+"
          r"(?P<s>[A-Za-z0-9._~+/\-]{8,}=*)",
          ("authorization",), fold=True, accept=_accept_value),
    # "Bearer" on its own is also an English word: the token must look random.
    _rule("bearer_token", r"\bBearer[ \t]+(?P<s>[A-Za-z0-9._~+/\-]{8,}=*)", ("Bearer",),
          accept=_accept_random),
    _rule("aws_secret_key",
          r"(?i)\baws_?secret_?access_?key[\"']?[ \t]*[:=][ \t]*[\"']?"
          r"(?P<s>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
          ("secret",), fold=True),
    _rule("cli_password",
          r"--(?!no-)(?:[A-Za-z0-9]+-)*(?i:pass(?:word|wd|phrase))(?:=|[ \t]+)(?P<s>" + _VALUE + ")",
          ("--",), accept=_accept_value, scope="whole"),
    # tools whose password flag is a short one: docker/podman login -p, ldap* -w, lftp -u
    # user,pw, smbclient -U user%pw, .netrc `password`, aws configure set, wandb login
    _rule("cli_password",
          r"\b(?:docker|podman|buildah|skopeo|helm|nerdctl)[ \t]+(?:registry[ \t]+)?login\b[^\n|;&]{0,200}?[ \t]-p[ \t]*(?P<s>" + _VALUE + ")"
          r"|\bldap(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop)\b[^\n|;&]{0,300}?[ \t]-w[ \t]*(?P<s2>" + _VALUE + ")"
          r"|\blftp\b[^\n|;&]{0,200}?[ \t]-u[ \t]*[^\s,'\"]+,(?P<s3>" + _VALUE + ")",
          ("docker", "podman", "buildah", "skopeo", "helm", "nerdctl", "ldap", "lftp"), accept=_accept_value),
    _rule("cli_password",
          r"\b(?:smbclient|smbget|smbcacls|rpcclient|mount\.cifs)\b[^\n|;&]{0,200}?(?:[ \t]-U[ \t]*|--user(?:name)?=)[^\s%'\"]+%(?P<s>" + _VALUE + ")",
          ("smb", "rpcclient", "cifs"), accept=_accept_value),
    # .netrc: `password X` after machine/login on the line, or alone on its line
    _rule("cli_password",
          r"(?:password|passwd)[ \t]+(?P<s>[^\s'\"]+)(?=[ \t]*(?:$|\n|(?:machine|login|account|macdef|default)\b))",
          ("password", "passwd"), accept=_accept_netrc, scope="at_guard"),
    _rule("aws_secret_key",
          r"\baws[ \t]+configure[ \t]+set[ \t]+(?:\S*\.)?(?:aws_secret_access_key|aws_session_token)[ \t]+(?P<s>" + _VALUE + ")",
          ("configure",), accept=_accept_value),
    _rule("cli_token",
          r"\bwandb[ \t]+login\b(?:[ \t]+--?(?:relogin|anonymously|verify|cloud)\b|[ \t]+--host(?:=|[ \t]+)\S+)*[ \t]+(?P<s>[A-Za-z0-9_\-]{32,100})\b",
          ("wandb",)),
    _rule("cli_password",
          # `-p` only: mysql's -P is the port, not the password.
          r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]{0,200}?[ \t]-p"
          r"(?P<s>" + _VALUE + ")"
          r"|\bsshpass[ \t]+(?:-[^p\s]\S*[ \t]+)*-p[ \t]*(?P<s2>" + _VALUE + ")"
          r"|\bcurl\b[^\n|;&]{0,200}?[ \t](?:-u|--user)[ \t]+[^\s:'\"]+:(?P<s3>" + _VALUE + ")",
          ("mysql", "mariadb", "sshpass", "curl"), accept=_accept_value),
    _rule("cli_token",
          r"--(?:[A-Za-z0-9]+[-_])*(?i:token|secret|(?:api|access|wandb|hf|auth|private|license|secret)[-_]?key)(?:=|[ \t]+)"
          r"(?P<s>" + _VALUE + ")",
          ("--",), accept=_accept_random, scope="whole"),
    _rule("secret_assignment", _ASSIGNMENT,
          ("pass", "pwd", "token", "secret", "key", "credential"), fold=True,
          accept=_accept_assignment, scope="at_guard"),
)

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _RULES))


def _literal_union(words: set[str]) -> re.Pattern[str]:
    """A regex finding any of ``words``, written as a trie (``a(?:bc|d)``) so that sre
    tests about one alternative per character instead of all of them."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict) -> str:
        if "" in node:
            return ""  # a shorter guard ends here: finding it is enough
        alternatives = [re.escape(char) + emit(child) for char, child in sorted(node.items())]
        return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"

    return re.compile(emit(trie))


# Text with none of the guards of any rule has no secret: one search settles it.
_ANY_GUARD = _literal_union({guard for rule in _RULES for guard in rule.guards})
_SECRET_GROUPS = ("s", "s2", "s3")


def _secret_span(m: re.Match[str]) -> tuple[int, int]:
    """The part of the match to replace: the named secret group if any, else all of it."""
    groups = m.re.groupindex
    for name in _SECRET_GROUPS:
        if name in groups and m.group(name) is not None:
            return m.span(name)
    return m.span()


def _guarded_lines(text: str, guards: tuple[str, ...]) -> list[tuple[int, int]]:
    """Sorted, disjoint (start, end) spans of the lines that contain a guard."""
    spans = []
    for guard in guards:
        at = text.find(guard)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            spans.append((start, end))
            at = text.find(guard, end)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


_SHORT = 4096  # below this, checking a rule's guards first is cheaper than any scan


def _apply(rule: _Rule, text: str) -> tuple[str, int]:
    """Run one rule; returns the new text and the number of secrets replaced."""
    short = len(text) <= _SHORT
    if short and not any(guard in text for guard in rule.guards):
        return text, 0
    count = 0
    mark = MARK.format(rule.kind)

    def replace(m: re.Match[str]) -> str:
        nonlocal count
        start, end = _secret_span(m)
        if _ALREADY in m.string and any(s < end and start < e for s, e in
                                        (mm.span() for mm in _MARKER.finditer(m.string))):
            # a value that is (part of) a marker an earlier rule wrote stays: the marker's
            # own colon must not read as user:password (idempotence)
            return m.group(0)
        if end - start >= 2 and m.string[start] == m.string[end - 1] and m.string[start] in "\"'":
            start, end = start + 1, end - 1  # keep the quotes: only the value goes
        if m.string.startswith(_ALREADY, start) or (rule.accept is not None and not rule.accept(m)):
            return m.group(0)
        count += 1
        whole, offset = m.group(0), m.start()
        return whole[: start - offset] + mark + whole[end - offset :]

    if rule.scope == "at_guard":
        matches = []
        for guard in rule.guards:
            at = text.find(guard)
            while at >= 0:
                m = rule.pattern.match(text, at)
                if m:
                    matches.append(m)
                at = text.find(guard, at + 1)
        spans = [(m.start(), m.end(), m) for m in sorted(matches, key=lambda m: m.start())]
    elif rule.scope == "whole" or short:
        return rule.pattern.sub(replace, text), count
    else:
        spans = [(start, end, None) for start, end in _guarded_lines(text, rule.guards)]

    pieces: list[str] = []
    done = 0
    for start, end, m in spans:
        if start < done:
            continue  # overlaps a match already replaced
        pieces.append(text[done:start])
        pieces.append(replace(m) if m is not None else rule.pattern.sub(replace, text[start:end]))
        done = end
    if not count:
        return text, 0
    pieces.append(text[done:])
    return "".join(pieces), count


def _run_rules(text: str, rules: tuple[_Rule, ...], kinds: list[str]) -> tuple[str, int]:
    total = 0
    for rule in rules:
        new_text, count = _apply(rule, text)
        if count:
            text = new_text
            total += count
            if rule.kind not in kinds:
                kinds.append(rule.kind)
    return text, total


def _run(text: str) -> tuple[str, int, list[str]]:
    kinds: list[str] = []
    if len(text) <= _SHORT:
        if not _ANY_GUARD.search(text):
            return text, 0, kinds
        text, total = _run_rules(text, _RULES, kinds)
        return text, total, kinds
    # Long text: key blocks span lines, so that rule runs on the whole text first. The
    # other rules are line-local: they run on line-aligned pieces of at most _SHORT
    # characters (a longer line is a piece of its own), and one _ANY_GUARD search lets
    # most pieces through untouched. This is twice as fast as whole-text passes.
    assert _RULES[0].scope == "whole"
    text, total = _run_rules(text, _RULES[:1], kinds)
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = text.rfind("\n", start, start + _SHORT) + 1
        if end <= start:  # no line end in reach: take the whole long line
            end = text.find("\n", start + _SHORT) + 1 or len(text)
        piece = text[start:end]
        if _ANY_GUARD.search(piece):
            piece, count = _run_rules(piece, _RULES[1:], kinds)
            total += count
        pieces.append(piece)
        start = end
    kinds.sort(key=KINDS.index)
    return "".join(pieces), total, kinds


def redact(text: str) -> Redacted:
    """Replace every secret in ``text`` with ``[REDACTED:<kind>]``.

    Redacting the result again changes nothing and counts zero.
    """
    clean, count, kinds = _run(text)
    return Redacted(clean, count, tuple(kinds))


def redact_text(text: str) -> str:
    """Same as ``redact(text).text``, for hot paths that only need the clean text."""
    return _run(text)[0]
