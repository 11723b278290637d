"""Safety checks for lessons: lint fixes before they spread, treat recalled text as data.

A lesson learned by one agent is shared with a lab and then a whole cluster, so a fix
that says ``chmod -R 777`` or ``curl ... | sh`` spreads harm at cluster scale; agents
blocked by a safeguard are known to weaken it (paper §VII). And recalled text is shown
to agents, so it must never act as instructions. This module has three jobs:

``lint_fix(text, actions, owner)``
    Rules over a fix's text and over each structured action. Every rule is one row of
    :data:`LINT_RULES` (code, severity, compiled regex, message): read the table to know
    what is flagged; add a row to flag more. ``block`` flags must not be promoted without
    a lead's audited override; ``warn`` flags are shown with the lesson.

``sanitize_text(text, max_len)`` / ``detect_injection(text)``
    Strip terminal escapes and invisible characters from recalled text, and flag text
    aimed at an agent (instruction overrides, role markers, hidden Unicode, encoded or
    hidden instructions). Rules are rows of :data:`INJECTION_RULES`.

``trust_level(source)``
    A label for a lesson's provenance, for JSON output.

Decisions worth knowing (the tests pin each one):

- A rule match is ignored when a negation stands at most two words before it in the
  same clause ("never ``chmod 777`` the project dir", "you do not need sudo"): lessons
  often say what *not* to do. A comma, colon or full stop ends the clause, so
  "don't worry, just sudo ..." is still flagged. Secrets are flagged regardless.
- Other users' directories: ``owner`` is the account the fix will run as. A path under
  ``/home/X``, ``/scratch/X``, ``/work/X``, ``/users/X`` (also ``/scratch/gpfs/X``,
  ``/global/homes/a/X``, ``~X``) that is *written* (cp/mv/rsync destination, chmod,
  mkdir, rm, ``>``, ``-o``/``--output``, ``TMPDIR=``/``*_HOME=``/``*_DIR=``...) is flagged
  when X is not ``owner``. With ``owner=None`` (a shared lesson: readers are unknown)
  every literal user name counts as someone else's; ``$USER``, ``${USER}`` and ``~/``
  are always fine. Reading another user's files is not flagged here.
- ``git push --force-with-lease`` is not flagged (it refuses to overwrite others' work);
  ``--force``/``-f`` is. ``eval "$(conda shell.bash hook)"`` is not untrusted input;
  ``eval "$1"`` and ``eval "$(cat file)"`` are.
- ``sanitize_text`` turns carriage returns into newlines instead of deleting them: a bare
  ``\\r`` can hide a line in a terminal, and as a newline both lines stay visible.
- Escapes and invisible characters are removed before any rule runs, so ``su\\u200bdo``
  is still ``sudo``; ``detect_injection`` additionally flags their presence.

Cost: about 55 µs to lint a typical fix (10,000 corpus fixes in ~0.55 s). Every window
between a command and its argument is bounded (``{0,300}``) and option runs are matched
possessively, to keep backtracking linear: the worst case found by probing each rule with
20,000-character lines of repeated tokens (``cp cp cp ...``) takes ~0.2 s.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any, Callable, Literal

from hpcmem.kb.errors import InputError

__all__ = [
    "SafetyFlag",
    "Rule",
    "LINT_RULES",
    "INJECTION_RULES",
    "LINT_CODES",
    "INJECTION_CODES",
    "TRUNCATION_MARK",
    "TRUST_LEVELS",
    "SOURCE_TRUST",
    "lint_fix",
    "is_blocked",
    "sanitize_text",
    "detect_injection",
    "trust_level",
    "trust_rank",
]

from hpcmem.kb.safety.trust import SOURCE_TRUST, TRUST_LEVELS, trust_level, trust_rank  # noqa: E402,F401 - re-exported

Severity = Literal["warn", "block"]


@dataclass(frozen=True)
class SafetyFlag:
    """One finding. ``evidence`` is the matched text (secrets redacted, at most 120
    characters); ``where`` says which part was checked: ``"text"`` or ``"actions[i]"``."""

    code: str
    severity: Severity
    message: str
    evidence: str
    where: str = "text"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Rule:
    """One row of a rule table.

    ``guards``: the regex runs only if one of these lower-case substrings occurs in the
    lower-cased text (cheap pre-filter; empty means always run). ``accept`` may veto a
    match (it gets the match and the owner). ``negatable``: a nearby negation cancels it.
    """

    code: str
    severity: Severity
    message: str
    pattern: re.Pattern[str]
    guards: tuple[str, ...] = ()
    accept: Callable[[re.Match[str], str | None], bool] | None = None
    negatable: bool = True


def _rule(code: str, severity: Severity, message: str, pattern: str, guards: tuple[str, ...] = (),
          *, flags: int = 0, accept: Callable[[re.Match[str], str | None], bool] | None = None,
          negatable: bool = True) -> Rule:
    return Rule(code, severity, message, re.compile(pattern, flags | re.MULTILINE), guards, accept, negatable)


# --- Building blocks -------------------------------------------------------------------

# End of a shell command segment: the rest of a command stays within these.
_SEG = r"[^\n;&|]"
# A path under a per-user root (/home/X, /scratch/X, /scratch/gpfs/X, /global/homes/a/X,
# ~X). Rules embed `_USER_PATH` (no groups, so it can appear in several alternatives);
# `_USER_NAME` then finds the user names inside a match.
_USER_ROOT = (
    r"(?:(?<![\w$])/(?:home|scratch|work|users|u)\d*/(?:(?:gpfs|network|lustre|local)/)?"
    r"|(?<![\w$])/global/(?:homes|cscratch\d*|u\d)/(?:[a-z]/)?|(?<![\w/$~])~)"
)
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,31}"
_USER_PATH = _USER_ROOT + _NAME
_USER_NAME = re.compile(_USER_ROOT + "(?P<user>" + _NAME + ")")
_QUOTED_USER_PATH = r"[\"']?" + _USER_PATH + r"[^\s;&|'\"]*[\"']?"
# Segments under those roots that are shared areas, not user names.
_NOT_USERS = frozenset({
    "shared", "share", "public", "common", "projects", "project", "groups", "group", "apps",
    "software", "sw", "tmp", "datasets", "data", "containers", "modules", "scratch", "home",
    "gpfs", "network", "lustre", "local",
})
# Words of one sentence: a full stop followed by a space ends it, the dot in `train.py` does not.
_CLAUSE = r"(?:[^\n.;]|\.(?=[\w/~]))"
# Programs that run what they read from stdin (a download piped into them runs it).
_SHELLS = r"(?:(?:ba|da|z|k|c|tc|fi)?sh\b|python[0-9.]*\b(?!\s+-[mc]\b)|perl\b|ruby\b|node\b)"

# A download run by an interpreter: `curl .. | sh`, `bash <(curl ..)`, `python -c "$(curl ..)"`.
_PIPE_TO_SHELL = (
    r"\b(?:curl|wget|fetch)\b[^\n|;]{0,300}\|\s*(?:sudo\s+(?:-\S+\s+)*+)?(?:env\s+(?:\S+=\S*\s+)*+)?" + _SHELLS +
    r"|(?:\b(?:ba|z|k|da)?sh|\bsource|(?:^|(?<=[\s;&]))\.)\s+(?:-\S+\s+)*+<\(\s*(?:curl|wget)\b"
    r"|(?:\s-c|\beval)\s+[\"']?(?:\$\(|`)\s*(?:curl|wget)\b"
)


def _foreign_user(m: re.Match[str], owner: str | None) -> bool:
    """A user path in the match belongs to somebody other than ``owner``."""
    for found in _USER_NAME.finditer(m.group(0)):
        user = found.group("user").rstrip(".-")
        if user.lower() not in _NOT_USERS and (owner is None or user != owner):
            return True
    return False


_UNTRUSTED_TMP = re.compile(r"(?:^|[=:\"'])(?:/tmp|/var/tmp|/dev/shm)\b")


def _recursive_rm(m: re.Match[str], owner: str | None) -> bool:
    return any(opt == "--recursive" or (not opt.startswith("--") and ("r" in opt or "R" in opt))
               for opt in m.group("opts").split())


def _untrusted_lib_path(m: re.Match[str], owner: str | None) -> bool:
    return bool(_UNTRUSTED_TMP.search(m.group(0))) or _foreign_user(m, owner)


# --- Lint rules: severity 'block' ------------------------------------------------------

_BLOCK_RULES: tuple[Rule, ...] = (
    _rule("world_writable", "block",
          "World-writable permissions let any cluster user replace your files or scripts; "
          "use 700/750 (or 2770 with a group) instead.",
          # octal mode whose 'other' digit has the write bit: 777, 666, 0777, 1777, 772...
          r"\b(?:chmod|(?:mkdir|install)\b" + _SEG + r"{0,300}?\s-m)\s*(?:-[A-Za-z]+\s+|--\S+\s+)*+[0-7]?[0-7]{2}[2367]\b"
          # symbolic: o+w, a+w, ugo+rwx, o=rwx (alone or in a comma list)
          r"|\bchmod\b" + _SEG + r"{0,300}?[\s,][ugo]*[oa][ugoa]*[+=][rwxXst]*w"
          # umask whose 'other' digit lets others write: 000, 0000, 020
          r"|\bumask\s+0?[0-7]?[0-7][0145]\b"
          r"|\bsetfacl\b" + _SEG + r"{0,300}?\b(?:o|other)::?[r-]?w",
          ("chmod", "umask", "setfacl", "-m")),
    _rule("pipe_to_shell", "block",
          "Piping a download into an interpreter runs unreviewed code; download, inspect, "
          "verify a checksum, then run.",
          _PIPE_TO_SHELL, ("curl", "wget", "fetch")),
    _rule("sudo_or_root", "block",
          "Fixes must work as an ordinary user: sudo/su/root are not available to jobs and a "
          "shared fix must never ask for them; ask the admins or install under $HOME.",
          r"(?<![\w/.-])(?:sudo|pkexec|doas)\b(?!-)"
          r"|(?<![\w-])su\s+(?:-l\s+|--login\s+|-\s+)?(?:root\b|-c\b)|(?<![\w-])su\s+-\s*$"
          r"|(?i:\b(?:run|rerun|running|execute|start|launch|log\s?in|login|ssh)\b" + _CLAUSE + r"{0,40}?\bas\s+(?:the\s+)?root\b)"
          r"|\broot@[\w.-]+"
          r"|--uid[= ](?:0|root)\b",
          ("sudo", "pkexec", "doas", "su ", "su\n", "root", "--uid")),
    _rule("tls_verify_disabled", "block",
          "Turning off TLS verification lets anyone on the path swap packages or models; "
          "point the tool at the site CA bundle instead.",
          r"\bverify(?:_ssl|_certs?)?\s*=\s*False\b|[\"']verify[\"']\s*:\s*False\b"
          r"|\bssl_verify\s*[=:]\s*[\"']?(?:False|false|no|0)\b|\bconda config --set ssl_verify (?:false|no|0)\b"
          r"|--no-check-certificate|\bcheck_certificate\s*=\s*off"
          r"|(?-i:\bcurl\b" + _SEG + r"{0,300}?\s(?:--insecure\b|-[a-zA-Z]*k[a-zA-Z]*\b))"  # -K is a config file
          r"|\bGIT_SSL_NO_VERIFY\s*=\s*[\"']?\w"
          r"|\bPYTHONHTTPSVERIFY\s*=\s*[\"']?0"
          r"|\b(?:REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|SSL_CERT_FILE)\s*=\s*(?:\"\"|''|(?=\s|$))"
          r"|\bNODE_TLS_REJECT_UNAUTHORIZED\s*=\s*[\"']?0"
          r"|--trusted-host\b|\bPIP_TRUSTED_HOST\s*=|^\s*trusted-host\s*="
          r"|\bhttp\.sslVerify(?:\s*=\s*|\s+)[\"']?false\b"
          r"|\bstrict-ssl(?:\s*=\s*|\s+)false\b"
          r"|\bssl\._create_unverified_context\b|\bssl\._create_default_https_context\s*="
          r"|\bCERT_NONE\b|\bcheck_hostname\s*=\s*False\b"
          r"|Verify-Peer\s*[= ]\s*[\"']?false",
          ("verify", "certificate", "curl", "ssl", "trusted", "cert_none", "check_hostname", "strict-ssl",
           "ca_bundle", "cert_file", "reject_unauthorized"),
          flags=re.IGNORECASE),
    _rule("unguarded_rm", "block",
          "rm -rf on $VAR/ deletes from / when VAR is unset; write \"${VAR:?}/...\" so the shell "
          "refuses an empty variable.",
          # a path that starts with a plain $VAR or ${VAR} (not ${VAR:?}) followed by /;
          # options are taken possessively (no backtracking), `_recursive_rm` checks for -r
          r"\brm\s+(?P<opts>(?:-[\w-]*\s+)*+)"
          r"[\"']?\$\{?(?!(?:HOME|USER|PWD)\b)[A-Za-z_][A-Za-z0-9_]*\}?[\"']?/",
          ("rm ",), accept=_recursive_rm),
    _rule("destructive_rm", "block",
          "This rm removes /, your home directory or everything in it.",
          r"\brm\s+(?:-[a-zA-Z]+\s+|--[\w-]+\s+)*+[\"']?(?:/|/\*|~|~/|~/\*|\$HOME|\$\{HOME\}|\$HOME/\*?|\$\{HOME\}/\*?)"
          r"[\"']?(?:/\*)?(?=$|[\s;&|)`'\"])"
          r"|--no-preserve-root",
          ("rm ", "preserve-root")),
    _rule("other_user_dir", "block",
          "Writes into another user's directory; a shared fix must use $USER/~ paths.",
          "|".join((
              # copy/move destination: the user path is the last word of the command
              r"\b(?:cp|mv|rsync|scp|install|ln)\b" + _SEG + r"{0,300}\s" + _QUOTED_USER_PATH + r"\s*(?=$|[\n;&|])",
              # commands that change whatever path they are given
              r"\b(?:chmod|chown|chgrp|setfacl|mkdir|rm|rmdir|touch|tee|truncate|unlink)\b" + _SEG + r"{0,300}?\s"
              + _QUOTED_USER_PATH,
              # redirections and output/working-directory options
              r"(?:>>?|(?<!\w)--?(?:o|e|output|error|chdir|D|P|C|directory-prefix|prefix|target|root)(?:=|\s+))\s*"
              + _QUOTED_USER_PATH,
              # caches, temp and install dirs set to the path
              r"\b[A-Z_]*(?:TMPDIR|TMP|TEMP|DIRS?|HOME|CACHE|ROOT|PREFIX)\s*=\s*" + _QUOTED_USER_PATH,
              # prose: "save checkpoints to /scratch/erin/ckpt"
              r"(?i:\b(?:write|save|copy|put|move|store|dump|install|stage)\b)" + _CLAUSE
              + r"{0,40}?\b(?:to|into|in|under)\s+`?" + _QUOTED_USER_PATH,
          )),
          ("/home", "/scratch", "/work", "/users", "/u", "/global", "~"),
          accept=_foreign_user),
)

# --- Lint rules: severity 'warn' -------------------------------------------------------

_HEAVY = (r"(?:it|this|that|everything|training|python\d?|torchrun|mpirun|mpiexec|deepspeed|accelerate"
          r"|the\s+(?!download|install|build|compil|setup|conda|pip|env|transfer|rsync)\w+"
          r"|\S+\.(?:py|sh|x|exe))")
_WARN_RULES: tuple[Rule, ...] = (
    _rule("login_node_compute", "warn",
          "Computation belongs in an sbatch/srun allocation, not on a shared login node.",
          r"\b(?:run|running|launch|launching|start|execute|train)\s+" + _HEAVY + r"\b" + _CLAUSE + r"{0,50}?"
          r"\b(?:on|from)\s+(?:the\s+|a\s+)?(?:login|head|front-?end|submit)[\s-]?nodes?\b"
          r"|\b(?:run|launch|start|execute)\b" + _CLAUSE + r"{0,60}?\b(?:directly|locally)\b" + _CLAUSE + r"{0,30}?"
          r"\b(?:instead of|rather than|without)\s+(?:using\s+)?(?:sbatch|srun|salloc|slurm|the\s+(?:queue|scheduler))"
          r"|\b(?:skip|bypass|avoid|skipping|bypassing)\s+(?:the\s+)?(?:slurm\s+)?(?:queue|scheduler|batch system)\b"
          r"|\bnohup\s+(?!(?:is|isn|does|doesn|will|won|should|can|cannot|only|here|inside|in|on|within|at)\b)[\w./$\"'-]",
          ("node", "directly", "locally", "queue", "scheduler", "batch system", "nohup"),
          flags=re.IGNORECASE),
    _rule("dev_shm_scratch", "warn",
          "/dev/shm is node RAM shared with every job on the node and is not job scratch; "
          "use $TMPDIR or /scratch/$USER.",
          r"(?:=[\"']?|\b(?:cp|mv|rsync|mkdir|cd|tar|unzip|ln)\b" + _SEG + r"{0,300}\s[\"']?|--tmpdir[= ]|"
          r"\b(?:copy|stage|extract|write|put|unpack|move|cache)\b" + _CLAUSE + r"{0,40}?\b(?:to|into|in)\s+[`\"']?)/dev/shm\b"
          r"|/dev/shm\b" + _CLAUSE + r"{0,20}?\bas\s+(?:a\s+)?(?:scratch|tmp|temp)",
          ("/dev/shm",), flags=re.IGNORECASE),
    _rule("public_bind", "warn",
          "A service bound to all interfaces is reachable by every user on the cluster network; "
          "bind to 127.0.0.1 and use an ssh tunnel.",
          r"(?<![A-Za-z])(?:host|ip|bind|listen|addr(?:ess)?|server_name)[\"']?\s*(?:=|:|\s)\s*[\"']?"
          r"(?:0\.0\.0\.0|\*(?=[\"'\s]|$)|::(?![0-9a-fA-F:])|\[::\])"
          r"|--bind_all\b|(?<![\d.])0\.0\.0\.0:\d+",
          ("0.0.0.0", "bind_all", "*", "::"), flags=re.IGNORECASE),
    _rule("security_disabled", "warn",
          "Disables a host security control (SELinux, firewall, container confinement).",
          r"\bsetenforce\s+0\b|\bSELINUX\s*=\s*disabled\b"
          r"|\bsystemctl\s+(?:stop|disable|mask)\s+(?:firewalld|iptables|nftables|ufw)\b|\bufw\s+disable\b"
          r"|\biptables\s+(?:-F|--flush|-P\s+INPUT\s+ACCEPT)\b"
          r"|\bseccomp[=:]unconfined\b|--privileged\b|\bapparmor[=:]unconfined\b"
          r"|\b(?:disable|turn off|stop)\s+(?:the\s+)?firewall\b",
          ("setenforce", "selinux", "firewall", "iptables", "nftables", "ufw", "unconfined", "privileged"),
          flags=re.IGNORECASE),
    _rule("git_hooks_skipped", "warn",
          "Skipping git hooks bypasses the checks the repository owners put there.",
          r"\bgit\s+(?:commit|push|merge|am|rebase)\b" + _SEG + r"{0,300}?\s--no-verify\b"
          r"|\bcore\.hooksPath\s*[= ]\s*[\"']?/dev/null",
          ("no-verify", "hookspath"), flags=re.IGNORECASE),
    _rule("slurm_limits_disabled", "warn",
          "Turns off Slurm's memory/cgroup enforcement, which protects the other jobs on the node.",
          r"\bConstrain(?:RAMSpace|SwapSpace|Cores|Devices)\s*=\s*no\b"
          r"|\bJobAcctGatherParams\s*=" + _SEG + r"{0,300}NoOverMemoryKill|\bTaskPlugin\s*=\s*task/none\b"
          r"|\b(?:disable|turn off|remove|bypass|get around)\s+(?:the\s+)?(?:slurm(?:'s)?\s+)?"
          r"(?:cgroups?|memory (?:limit|enforcement|cgroup)|oom[- ]killer)"
          r"|>\s*/sys/fs/cgroup/\S*(?:memory\.(?:limit_in_bytes|max|high)|cpu\.max)"
          r"|-\d+\s*>\s*\S*oom_score_adj\b|\boom_score_adj\s*=\s*-\d|\bMemoryMax\s*=\s*infinity\b",
          ("constrain", "noovermemorykill", "task/none", "cgroup", "memory", "oom"),
          flags=re.IGNORECASE),
    _rule("mem_whole_node", "warn",
          "--mem=0 asks for all the memory of every node, which blocks other jobs; request what "
          "the job needs (MaxRSS plus headroom).",
          r"--mem(?:=|\s+)0+(?:[KMGT]B?)?(?![\w.])",
          ("--mem",)),
    _rule("git_destructive", "warn",
          "Discards or overwrites work that may be shared (others' commits, untracked results).",
          r"\bgit\s+reset\s+(?:\S+\s+){0,8}?--hard\b|\bgit\s+clean\s+(?:\S+\s+){0,8}?-[a-zA-Z]*f[a-zA-Z]*\b"
          r"|\bgit\s+push\b" + _SEG + r"{0,300}?\s(?:--force(?!-)\b|-[a-zA-Z]*f\b|\+[\w./-]+)",
          ("git",)),
    _rule("eval_untrusted", "warn",
          "eval of arguments, files or downloads runs whatever they contain.",
          r"\beval\s+[\"']?\$(?:[0-9@*]|\{?(?:[1-9]|@|\*|REPLY|INPUT|input|line|cmd|CMD|COMMAND|command|ARGS?|args?)\b)"
          r"|\beval\s+[\"']?(?:\$\(|`)\s*(?:(?:cat|head|tail|nc|ssh|read)(?![\w-])|<)"
          r"|\beval\s*\(\s*(?:input\s*\(|sys\.argv|os\.environ|request|line\b|open\s*\()",
          ("eval",)),
    _rule("break_system_packages", "warn",
          "--break-system-packages lets pip overwrite the system Python's packages; use a venv "
          "or conda env.",
          r"--break-system-packages\b|\bPIP_BREAK_SYSTEM_PACKAGES\s*=\s*[\"']?(?:1|true|yes)",
          ("break",), flags=re.IGNORECASE),
    _rule("ld_path_untrusted", "warn",
          "Loading libraries from /tmp, /dev/shm or another user's directory runs code anyone "
          "(or that user) can replace.",
          r"\bLD_(?:PRELOAD|LIBRARY_PATH|AUDIT)\s*=\s*[\"']?[^\s\"';]*",
          ("ld_",), accept=_untrusted_lib_path),
)


def _secret_flags(text: str, where: str) -> list[SafetyFlag]:
    """Credentials in a fix: reuse the redactor's rules (one place says what a secret is)."""
    try:
        from hpcmem.kb.safety.redact import redact
    except ImportError:  # pragma: no cover - the redactor ships with hpcmem
        match = _FALLBACK_SECRET.search(text)
        kinds = ("secret",) if match else ()
    else:
        kinds = redact(text).kinds
    if not kinds:
        return []
    return [SafetyFlag("secret_in_fix", "block",
                       "The fix contains a credential; shared lessons are read by every user. "
                       "Remove it and rotate the secret.",
                       ", ".join(f"[REDACTED:{k}]" for k in kinds), where)]


_FALLBACK_SECRET = re.compile(
    r"(?i)(?:password|passwd|token|secret|api_?key)\s*[:=]\s*['\"]?[^\s'\"$<]{6,}"
    r"|\b(?:ghp_|glpat-|hf_|sk-|xox[bp]-|AKIA)[A-Za-z0-9_\-]{12,}"
)

LINT_RULES: tuple[Rule, ...] = _BLOCK_RULES + _WARN_RULES
LINT_CODES: dict[str, Severity] = {r.code: r.severity for r in LINT_RULES} | {"secret_in_fix": "block"}

# A negation this close before a match (same clause, at most two words between) means
# the lesson warns against the thing instead of recommending it.
_NEGATION = re.compile(
    r"(?i)\b(?:no|not|never|without|instead\s+of|rather\s+than|avoid|avoiding|lack|lacks|lacking"
    r"|don'?t|doesn'?t|cannot|can'?t|won'?t|isn'?t|aren'?t|nor)\b"
    r"(?:[ \t]+[\w$/.\-]+){0,2}[ \t]*[`\"'(]*[ \t]*$"
)


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION.search(text, max(0, start - 60), start))


_EVIDENCE_MAX = 120


def _evidence(snippet: str) -> str:
    snippet = " ".join(snippet.split())
    try:
        from hpcmem.kb.safety.redact import redact_text
    except ImportError:  # pragma: no cover
        pass
    else:
        snippet = redact_text(snippet)
    return snippet if len(snippet) <= _EVIDENCE_MAX else snippet[: _EVIDENCE_MAX - 1] + "…"


def _run_rules(rules: tuple[Rule, ...], text: str, where: str, owner: str | None) -> list[SafetyFlag]:
    flags: list[SafetyFlag] = []
    folded = text.lower()
    for rule in rules:
        if rule.guards and not any(g in folded for g in rule.guards):
            continue
        for m in rule.pattern.finditer(text):
            if rule.accept is not None and not rule.accept(m, owner):
                continue
            if rule.negatable and _negated(text, m.start()):
                continue
            flags.append(SafetyFlag(rule.code, rule.severity, rule.message, _evidence(m.group(0)), where))
            break  # one flag per rule and place is enough to act on
    return flags


def _action_text(action: dict[str, Any]) -> str:
    """The shell-like form of an action, so the text rules apply to it unchanged."""
    kind = action.get("type")
    if kind == "command":
        return str(action.get("command") or "")
    if kind == "env":
        return f"export {action.get('name', '')}={action.get('value', '')}"
    if kind == "sbatch":
        option, value = action.get("option") or "", action.get("to")
        return f"#SBATCH {option}={value}" if value not in (None, "") else f"#SBATCH {option}"
    if kind == "module":
        return f"module {action.get('op', '')} {action.get('name', '')}"
    # Unknown action types: check every string they carry.
    return "\n".join(str(v) for k, v in action.items() if k != "type" and isinstance(v, (str, int, float)))


# Terminal escapes and invisible characters: removed from recalled text (sanitize_text)
# and before linting or injection checks, so they cannot hide a command or a trigger word.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"                    # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: titles, OSC 8 hyperlinks (text stays)
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"      # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"                            # other two/three-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"                      # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c|\x1b\\)?"  # 8-bit OSC/DCS/SOS/PM/APC
)
# Controls (except \t and \n), DEL and C1, then invisible and direction-changing characters.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f]"
)


def _visible(text: str) -> str:
    """The text as a terminal shows it: no escapes, no invisible characters."""
    text = _ESCAPES.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _INVISIBLE.sub("", text)


def lint_fix(text: str, actions: list[dict[str, Any]] | None = None,
             owner: str | None = None) -> list[SafetyFlag]:
    """Flag unsafe advice in a fix's text and its structured actions.

    ``owner`` is the user the fix will run as (see the module docstring for ``None``).
    Flags come in rule order, text first, then each action (``where="actions[i]"``); each
    rule is reported at most once per place. Raises :class:`InputError` when an action is
    not a mapping.
    """
    if not isinstance(text, str):
        raise InputError(f"fix text must be a string, not {type(text).__name__}")
    places: list[tuple[str, str]] = [("text", text)]
    for i, action in enumerate(actions or []):
        if not isinstance(action, dict):
            raise InputError(f"action {i} must be a mapping like {{'type': 'command', ...}}, "
                             f"not {type(action).__name__}")
        places.append((f"actions[{i}]", _action_text(action)))
    flags: list[SafetyFlag] = []
    for where, chunk in places:
        chunk = _visible(chunk)  # `su\u200bdo` must not slip past the rules
        if not chunk:
            continue
        flags.extend(_run_rules(LINT_RULES, chunk, where, owner))
        flags.extend(_secret_flags(chunk, where))
    return flags


def is_blocked(flags: list[SafetyFlag]) -> bool:
    """True when any flag must stop promotion without an audited override."""
    return any(f.severity == "block" for f in flags)


# --- Sanitizing recalled text ----------------------------------------------------------

TRUNCATION_MARK = "…[truncated]"

def sanitize_text(text: str, max_len: int) -> str:
    """Make recalled text safe to print and show to an agent: plain, visible characters.

    Removes ANSI/VT escape sequences (CSI, OSC incl. OSC 8 hyperlinks - their visible text
    stays - DCS/APC strings, 8-bit C1 forms), control characters other than ``\\n`` and
    ``\\t`` (``\\r\\n`` and a bare ``\\r`` become ``\\n``), bidi embeddings/overrides/isolates,
    zero-width and other invisible characters and Unicode tag characters; normalizes to NFC;
    and caps the result at ``max_len`` characters, ending with :data:`TRUNCATION_MARK` when
    cut. Idempotent: sanitizing the result again returns it unchanged.
    """
    if max_len < len(TRUNCATION_MARK):
        raise InputError(f"max_len must be at least {len(TRUNCATION_MARK)}, got {max_len}")
    text = _visible(text).replace("\u2028", "\n").replace("\u2029", "\n")
    text = unicodedata.normalize("NFC", text)
    if len(text) > max_len:
        text = text[: max_len - len(TRUNCATION_MARK)] + TRUNCATION_MARK
    return text


# --- Injection detection ---------------------------------------------------------------

_I = re.IGNORECASE
_INSTRUCTION_WORDS = r"(?:instructions?|prompts?|rules|directions|directives|guidelines|messages|context|commands)"
INJECTION_RULES: tuple[Rule, ...] = (
    _rule("override_instructions", "block", "Tries to override the reader's instructions.",
          r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+|every\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+|these\s+)?"
          r"(?:previous|prior|above|earlier|preceding|original|system|former|existing)\s+" + _INSTRUCTION_WORDS +
          r"|\b(?:ignore|disregard|forget)\s+(?:all\s+|everything\s+)?(?:of\s+)?(?:the\s+)?(?:above|before|said|prior)\b"
          r"(?!\s+(?:warning|warnings|message|error|errors|line|lines|output|note|log|traceback|step|checkpoint|value))"
          r"|\bnew\s+instructions\s*:|\byour\s+(?:new|real|actual)\s+(?:instructions|task|orders)\b",
          ("ignore", "disregard", "forget", "override", "bypass", "instructions", "your "), flags=_I, negatable=False),
    _rule("role_reassignment", "block", "Tries to give the reader a new role or mode.",
          r"\byou\s+are\s+now\s+(?:an?\s+|the\s+|my\s+|in\s+)?(?:\w+\s+){0,2}?"
          r"(?:assistant|ai|agent|bot|model|admin(?:istrator)?|root|superuser|hacker"
          r"|developer\s+mode|god\s+mode|dan|unrestricted|jailbroken)\b"
          r"|\byou\s+are\s+(?:now\s+)?(?:an?\s+)?(?:unrestricted|jailbroken|uncensored|unfiltered)\b"
          r"|\b(?:pretend|act)\s+(?:to\s+be|as\s+if\s+you\s+(?:are|were))\s+(?:an?\s+)?(?:\w+\s+){0,2}?"
          r"(?:admin|root|unrestricted|different)\b"
          r"|\benter\s+(?:developer|god|dan|jailbreak)\s+mode\b",
          ("you are", "pretend", "act ", "mode"), flags=_I, negatable=False),
    _rule("system_prompt", "warn", "Talks about the reader's system prompt.",
          r"\b(?:your|new|updated|real|actual|hidden|original|override)\s+system\s+(?:prompt|message|instructions?)\b"
          r"|\b(?:reveal|print|show|repeat|output|leak|dump|disclose)\s+(?:your|the)\s+"
          r"(?:system\s+prompt|instructions|initial\s+prompt)\b",
          ("system", "instructions", "initial"), flags=_I, negatable=False),
    _rule("addresses_agent", "warn", "Addresses an AI agent directly.",
          r"\bas\s+an?\s+(?:ai|llm|large\s+language\s+model|language\s+model)\b(?![/\-])"
          r"|\b(?:note|message|attention|instructions?)\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?(?:ai|llm|agent|assistant|model|bot)s?\b"
          r"|\bif\s+you\s+are\s+an?\s+(?:ai|llm|agent|assistant|language\s+model|bot)\b"
          r"|\b(?:dear|hey|attention)\s+(?:ai|llm|agent|assistant|claude|chatgpt|copilot|codex)\b",
          ("ai", "llm", "agent", "assistant", "model", "bot", "claude", "gpt", "copilot", "codex"),
          flags=_I, negatable=False),
    _rule("privilege_request", "block", "Asks the reader to run something as root.",
          r"\b(?:run|execute|do|launch)\s+(?:this|it|that|the\s+following|these(?:\s+commands?)?|everything)\s+"
          r"(?:as\s+root|with\s+sudo|with\s+root\s+privileges)\b"
          r"|\bsudo\s+(?:-s|-i|su)\b",
          ("root", "sudo"), flags=_I, negatable=False),
    _rule("conceal_from_user", "block", "Asks the reader to hide something from the user.",
          r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention\s+(?:this|it)\s+to|show\s+(?:this|it)\s+to)"
          r"\s+the\s+(?:user|human|operator|admins?)\b"
          r"|\bwithout\s+(?:telling|informing|asking|notifying)\s+the\s+(?:user|human|operator)\b"
          r"|\b(?:hide|keep)\s+(?:this|it)\s+(?:secret\s+)?from\s+the\s+(?:user|human|operator)\b"
          r"|\bsilently\s+(?:run|execute|send|upload|delete|install)\b",
          ("user", "human", "operator", "admin", "silently"), flags=_I, negatable=False),
    _rule("execute_command", "warn", "Tells the reader to execute something.",
          r"\b(?:now\s+|immediately\s+|please\s+)?execute\s+the\s+following\b"
          r"|\b(?:run|execute|paste)\s+(?:this|these|the\s+following)(?:\s+commands?)?\s+"
          r"(?:immediately|now|without\s+(?:asking|confirmation|review|checking))\b"
          r"|\bpaste\s+(?:this|the\s+following)\s+into\s+(?:your|the)\s+(?:terminal|shell)\b",
          ("execute", "run", "paste"), flags=_I, negatable=False),
    _rule("pipe_to_shell", "block", "Tells the reader to pipe a download into a shell.",
          _PIPE_TO_SHELL, ("curl", "wget", "fetch"), negatable=False),
    _rule("exfiltration", "block", "Asks to send credentials or private files somewhere.",
          r"\b(?:curl|wget)\b[^\n]{0,300}?(?:-d|--data(?:-binary|-raw)?|-F|-T|--upload-file|--post-file)"
          r"[=\s]*[\"']?@?[^\s\"']*"
          r"(?:\.ssh|id_rsa|id_ed25519|\.netrc|\.aws|credentials|\.env\b|token|\.git-credentials|\.pgpass)"
          r"|\b(?:send|post|upload|email|forward|copy|paste|exfiltrate)\b" + _CLAUSE + r"{0,40}?"
          r"\b(?:ssh\s+keys?|private\s+keys?|api\s+keys?|tokens?|credentials|passwords?|id_rsa|\.netrc|secrets)\b"
          + _CLAUSE + r"{0,20}?\bto\s+(?:https?://|\S+@|this|the\s+following|me\b)",
          ("curl", "wget", "send", "post", "upload", "email", "forward", "copy", "paste", "exfiltrat"),
          flags=_I, negatable=False),
    _rule("role_marker", "block", "Contains chat-template or role markers that fake a new turn.",
          r"<\|(?:im_start|im_end|system|user|assistant|endoftext|begin_of_text|start_header_id|end_header_id|eot_id)\|>"
          r"|\[/?INST\]|<</?SYS>>"
          r"|^[ \t]*(?:#{1,6}|\*\*|\[)[ \t]*(?:system|assistant|developer|user)[ \t]*(?:\*\*|\])?[ \t]*:"
          r"|^[ \t]*(?:Human|Assistant)[ \t]*:[ \t]"
          r"|</?(?:system|system_prompt|instructions|admin)>",
          ("<|", "inst]", "<<sys", "<</sys", "system", "assistant", "developer", "user", "human", "ai",
           "instructions", "admin"),
          flags=_I, negatable=False),
    _rule("hidden_markup", "warn", "Contains text styled to be invisible to a human reader.",
          r"style\s*=\s*[\"'][^\"']{0,300}?"
          r"(?:display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0|opacity\s*:\s*0(?![.\d]))"
          r"|<\w+[^>]{0,300}?\shidden(?:\s*=|[\s>])"
          r"|^\[//\]:\s*#",
          ("style", "hidden", "[//]"), flags=_I, negatable=False),
)
# Lint rules that make a decoded blob an instruction by themselves (no owner is known there).
_DECODED_LINT_RULES = tuple(r for r in _BLOCK_RULES if r.code in
                            ("world_writable", "pipe_to_shell", "sudo_or_root", "destructive_rm"))

_TAG_CHARS = re.compile("[\U000e0000-\U000e007f]")
# Invisible characters that hide or reorder text, with the name used in the flag. Zero-width
# characters count only between ASCII letters/digits: ZWNJ in Persian words and ZWJ in
# emoji sequences are ordinary text.
_HIDDEN_UNICODE: tuple[tuple[re.Pattern[str], str], ...] = (
    (_TAG_CHARS, "tag characters"),
    (re.compile("[\u202a-\u202e\u2066-\u2069]"), "bidi control characters"),
    (re.compile("[A-Za-z0-9][\u200b-\u200d\u2060\ufeff\u00ad]+[A-Za-z0-9]"), "zero-width characters inside words"),
)
_HTML_COMMENT = re.compile(r"<!--(.*?)(?:-->|$)", re.DOTALL)
_COMMENT_SUSPECT = re.compile(
    r"(?i)\b(?:ignore|disregard|instructions?|assistant|ai|llm|agents?|system\s+prompt|sudo|curl|wget"
    r"|exfiltrat\w*|password|token|secret|do\s+not\s+tell|execute|you\s+must|you\s+are)\b"
)
_BASE64_BLOB = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=])")
_BASE64_MAX_BLOBS = 8
_BASE64_MAX_CHARS = 8192

INJECTION_CODES: dict[str, Severity] = {r.code: r.severity for r in INJECTION_RULES} | {
    "hidden_unicode": "block", "hidden_comment": "block", "encoded_instruction": "block",
}


def _decoded_blobs(text: str) -> list[str]:
    """Texts of the base64 runs in ``text`` that decode to mostly printable UTF-8."""
    found: list[str] = []
    for m in _BASE64_BLOB.finditer(text):
        if len(found) >= _BASE64_MAX_BLOBS:
            break
        blob = m.group(0)[:_BASE64_MAX_CHARS]
        # hex digests and plain identifiers are valid base64 too; real payloads mix cases
        if blob.isalnum() and (blob.islower() or blob.isupper() or blob.isdigit()):
            continue
        try:
            decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        printable = sum(ch.isprintable() or ch in "\n\t" for ch in decoded)
        if decoded and printable / len(decoded) > 0.95:
            found.append(decoded)
    return found


def detect_injection(text: str) -> list[SafetyFlag]:
    """Flag text that addresses an agent with instructions instead of describing a failure.

    Checks, in order: the rules of :data:`INJECTION_RULES` on the text (after removing
    invisible characters, so ``ig\\u200bnore`` still reads as ``ignore``); hidden Unicode
    (tag characters, bidi controls, zero-width characters inside words); HTML comments
    whose content looks like instructions; base64 blobs that decode to text the rules
    flag (at most 8 blobs, each cut at 8 KB, not recursive). One flag per code.
    """
    flags: list[SafetyFlag] = []
    seen: set[str] = set()

    def add(flag: SafetyFlag) -> None:
        if flag.code not in seen:
            seen.add(flag.code)
            flags.append(flag)

    visible = _visible(text)
    for flag in _run_rules(INJECTION_RULES, visible, "text", None):
        add(flag)

    for pattern, kind in _HIDDEN_UNICODE:
        hidden = pattern.search(text)
        if hidden is None:
            continue
        # ASCII smuggled in tag characters is text an agent may still read: show and check it
        tags = "".join(chr(ord(c) - 0xE0000) for c in _TAG_CHARS.findall(text) if 0x20 <= ord(c) - 0xE0000 < 0x7F)
        evidence = f"{kind}: {tags!r}" if tags else f"{kind}: {hidden.group(0)!r}"
        add(SafetyFlag("hidden_unicode", "block", f"Contains invisible {kind} that can hide or reorder text.",
                       _evidence(evidence)))
        if tags:
            for flag in _run_rules(INJECTION_RULES, tags, "text", None):
                add(flag)
        break

    for m in _HTML_COMMENT.finditer(visible):
        body = m.group(1)
        if _COMMENT_SUSPECT.search(body) or _run_rules(INJECTION_RULES, body, "text", None):
            add(SafetyFlag("hidden_comment", "block", "An HTML comment (invisible when rendered) carries instructions.",
                           _evidence(m.group(0))))
            break

    for decoded in _decoded_blobs(visible):
        inner = _run_rules(INJECTION_RULES, decoded, "text", None) + _run_rules(
            _DECODED_LINT_RULES, decoded, "text", None)
        if inner:
            codes = ", ".join(sorted({f.code for f in inner}))
            add(SafetyFlag("encoded_instruction", "block",
                           f"A base64 blob decodes to instructions ({codes}).", _evidence(decoded)))
            break
    return flags
