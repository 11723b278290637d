"""Find and replace the secrets gitleaks' rules describe, in one piece of text.

The rules come from :mod:`hpcmem.kb.safety.gitleaks_rules`; the redactor
(:mod:`hpcmem.kb.safety.redact`) says which rules may match (their keywords occur in the
piece) and runs :meth:`GitleaksScanner.redact` before its own HPC rules. A finding is kept
as gitleaks keeps it:

- the secret is the rule's ``secretGroup``, else its first non-empty group, else the match;
- a secret whose Shannon entropy is at most the rule's ``entropy`` is no secret;
- the global allowlist and the rule's allowlists (regexes on the secret, the match or the
  line; stopwords in the secret; ``OR``/``AND``) let it through; an allowlist that also
  names file paths cannot hold for log text (no file name) and only counts under ``OR``.

What is replaced (the redaction span) differs from gitleaks' report where that would leave
part of a credential behind:

- the span runs on to the end of the token (``[A-Za-z0-9+/=_-]``): some rules name only a
  token's fixed head (``aws-amazon-bedrock-api-key-short-lived``) or a fragment of it
  (``jwt-base64``'s first group is a literal header piece);
- the whole match is replaced when the group is less than half of a match without spaces
  (the microsoft-teams webhook rule's group is 4 repeated characters of the URL), except
  a URL's scheme and host when the match starts with them (``https://hooks.slack.com/``
  stays: it names the service; the path is the credential);
- overlapping spans are merged (flutterwave's encryption and secret keys, gitlab-pat and
  gitlab-pat-routable match the same token differently);
- a value that overlaps a ``[REDACTED:...]`` marker is left alone (redacting twice changes
  nothing).

The marker names a kind (:func:`kind_of`): hpcmem's own name where hpcmem already had one
for that credential family (so a GitHub token is ``[REDACTED:github_token]`` whichever
layer found it, and stores keep one name per family across releases), else gitleaks' rule
id in snake case (``[REDACTED:sendgrid_api_token]``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from hpcmem.kb.safety.gitleaks_rules import RuleTable

__all__ = ["GitleaksScanner", "kind_of", "SCAN_VERSION"]

# Bump when what is replaced changes (spans, kinds, allowlist handling): stores redacted
# under the previous version are told to re-scrub (kb/safety/redact.py: rules_digest).
SCAN_VERSION = 1

_ALREADY = "[REDACTED:"
# A rule that starts with a word and an unbounded gap (curl-auth-user, curl-auth-header:
# `\bcurl\b(?:.*|.*(?:[\r\n]{1,2}.*){1,5})...`) is tried once per line, at the word's first
# occurrence there: a later occurrence on the same line sees the same rest of the text, so it
# cannot match where the first did not. Tried at every occurrence (what finditer does), a
# line of 20,000 `curl` words took 106 s; this way it is linear.
_GAP_RULE = re.compile(r"(\\b\w+\\b)(?:\(\?:)?\.\*")
# `https://hooks.slack.com/`: a URL's scheme and host, no user or password in it.
_URL_HOST = re.compile(r"(?:https?://)?[A-Za-z0-9][A-Za-z0-9.-]*\.[A-Za-z]{2,}/")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")

# gitleaks rule id (or id prefix, ending in "-") -> hpcmem's kind for that family.
_KINDS = {
    "aws-access-token": "aws_access_key_id",
    "gcp-api-key": "gcp_api_key",
    "github-": "github_token",
    "gitlab-": "gitlab_token",
    "huggingface-": "huggingface_token",
    "openai-api-key": "openai_key",
    "anthropic-": "anthropic_key",
    "slack-webhook-url": "slack_webhook",
    "slack-": "slack_token",
    "stripe-access-token": "stripe_key",
    "jwt": "jwt",
    "jwt-base64": "jwt",
    "private-key": "private_key",
    "curl-auth-user": "cli_password",
    "curl-auth-header": "bearer_token",
}


def kind_of(rule_id: str) -> str:
    """The marker kind of a gitleaks rule's findings."""
    kind = _KINDS.get(rule_id)
    if kind is None:
        for prefix, family in _KINDS.items():
            if prefix.endswith("-") and rule_id.startswith(prefix):
                kind = family
                break
        else:
            kind = rule_id.replace("-", "_").replace(".", "_")
    return kind


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


class _Allowlist:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.regexes = tuple(re.compile(x, re.ASCII) for x in raw["re"])
        self.stopwords = tuple(raw["stop"])
        self.target = raw["target"]
        self.all = raw["cond"] == "AND"
        self.paths = raw.get("paths", False)

    def allows(self, secret: str, match: str, line: str) -> bool:
        checks = []
        if self.regexes:
            text = secret if self.target == "secret" else match if self.target == "match" else line
            checks.append(any(rx.search(text) for rx in self.regexes))
        if self.stopwords:
            low = secret.lower()
            checks.append(any(word in low for word in self.stopwords))
        if self.paths:
            checks.append(False)  # log text has no file path to match
        if not checks:
            return False
        return all(checks) if self.all else any(checks)


class GitleaksScanner:
    """gitleaks' rules over pieces of text. Regexes and allowlists are compiled when first
    needed: a short redaction compiles the one or two rules whose keywords it holds."""

    def __init__(self, table: RuleTable) -> None:
        self.table = table
        self.rules = table.rules
        self.kinds = tuple(kind_of(rule["id"]) for rule in self.rules)
        self._regexes: dict[int, re.Pattern[str]] = {}
        self._allows: dict[int, tuple[_Allowlist, ...]] = {}
        self._global: _Allowlist | None = None
        by_keyword: dict[str, list[int]] = {}
        for i, rule in enumerate(self.rules):
            for keyword in rule["keywords"]:
                by_keyword.setdefault(keyword, []).append(i)
        self.by_keyword = {k: tuple(v) for k, v in by_keyword.items()}
        # (every rule has keywords in gitleaks' default config; one without would run on every piece)
        self.always = tuple(i for i, rule in enumerate(self.rules) if not rule["keywords"])
        self.lead = {}
        for i, rule in enumerate(self.rules):
            gap = _GAP_RULE.match(rule["re"])
            if gap:
                self.lead[i] = re.compile(gap.group(1), re.ASCII)

    def _regex(self, i: int) -> re.Pattern[str]:
        rx = self._regexes.get(i)
        if rx is None:
            rx = self._regexes[i] = re.compile(self.rules[i]["re"], re.ASCII)
        return rx

    def _allowed(self, i: int, secret: str, match: str, line: str) -> bool:
        if self._global is None:
            self._global = _Allowlist(self.table.allow)
        allows = self._allows.get(i)
        if allows is None:
            allows = self._allows[i] = tuple(_Allowlist(a) for a in self.rules[i]["allow"])
        return self._global.allows(secret, match, line) or any(a.allows(secret, match, line) for a in allows)

    def _span(self, i: int, m: re.Match[str]) -> tuple[int, int] | None:
        """The span to replace for one match, or None when it is no finding."""
        rule = self.rules[i]
        group = rule["group"]
        if group:
            start, end = m.span(group)
        else:
            start, end = m.span()
            for k in range(1, (m.re.groups or 0) + 1):
                if m.group(k):
                    start, end = m.span(k)
                    break
        if start < 0 or end <= start:
            return None
        text = m.string
        secret = text[start:end]
        if rule["entropy"] is not None and _entropy(secret) <= rule["entropy"]:
            return None
        whole = m.group(0)
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line = text[line_start : len(text) if line_end < 0 else line_end]
        if self._allowed(i, secret, whole, line):
            return None
        if not rule["semi"] and 2 * (end - start) < len(whole) and not any(c.isspace() for c in whole):
            start, end = m.span()  # the group is a fragment; the match is the credential
        if (start, end) == m.span():
            host = _URL_HOST.match(text, start, end)
            if host:  # a webhook URL: its scheme and host name the service, the path is the secret
                start = host.end()
        return start, end

    def _matches(self, i: int, piece: str):
        lead = self.lead.get(i)
        if lead is None:
            yield from self._regex(i).finditer(piece)
            return
        # `\bcurl\b(?:.*|...)`: tried at the word's first occurrence on a line; when that
        # fails, the rest of the line is skipped (see _GAP_RULE)
        rx = self._regex(i)
        pos = 0
        while True:
            word = lead.search(piece, pos)
            if word is None:
                return
            m = rx.match(piece, word.start())
            if m is not None and m.end() > m.start():
                yield m
                pos = m.end()
                continue
            line_end = piece.find("\n", word.end())
            if line_end < 0:
                return
            pos = line_end + 1

    def redact(self, piece: str, keywords: set[str], kinds: list[str]) -> tuple[str, int]:
        """``piece`` with the findings of the rules of ``keywords`` replaced by markers, and
        how many were replaced; their kinds are added to ``kinds``."""
        candidates = {i for k in keywords for i in self.by_keyword.get(k, ())}
        candidates.update(self.always)
        if not candidates:
            return piece, 0
        spans = []
        for i in sorted(candidates):
            for m in self._matches(i, piece):
                span = self._span(i, m)
                if span is not None:
                    spans.append((span[0], span[1], i))
        if not spans:
            return piece, 0
        spans.sort()
        merged: list[list[int]] = []
        for start, end, i in spans:
            while end < len(piece) and piece[end] in _TOKEN_CHARS:
                end += 1
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(end, merged[-1][1])
            else:
                merged.append([start, end, i])
        out: list[str] = []
        done = count = 0
        for start, end, i in merged:
            if _touches_marker(piece, start, end):
                continue
            out.append(piece[done:start])
            kind = self.kinds[i]
            out.append(f"[REDACTED:{kind}]")
            if kind not in kinds:
                kinds.append(kind)
            done = end
            count += 1
        if not count:
            return piece, 0
        out.append(piece[done:])
        return "".join(out), count


def _touches_marker(text: str, start: int, end: int) -> bool:
    """True when text[start:end] overlaps a ``[REDACTED:...]`` marker."""
    at = text.rfind(_ALREADY, max(0, start - 64), end)
    return at >= 0 and text.find("]", at) >= start
