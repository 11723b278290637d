"""Which of many words occur in a text: one pass, for the redactor's keyword prefilter.

gitleaks stays fast by running a rule's regex only where one of the rule's keywords occurs;
hpcmem's own rules have guards that work the same way. The redactor puts both word sets in
one :class:`KeywordGate` and asks it, once per piece of text (lower-cased), which words
occur; only the rules of those words then run.

Backed by ``ahocorasick-rs`` (Apache-2.0; a Rust Aho-Corasick automaton: one pass over the
text whatever the number of words). Without it (an unusual platform), a pure-Python
fallback: one regex over a trie of the words finds the longest word where it matches, and
the words inside or overlapping a found one are derived from it, so the answer is the same,
at about a fifth of the speed (about 20 MB/s instead of 100 on job-log text, which puts
redaction under its 20 MB/s floor: docs/benchmarks.md).
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["KeywordGate", "backend"]

_NONE: frozenset[int] = frozenset()
_SURROGATE = re.compile("[\ud800-\udfff]")


def backend() -> str:
    """The implementation a new gate uses: ``ahocorasick-rs`` or ``python``."""
    try:
        import ahocorasick_rs  # noqa: F401
    except ImportError:
        return "python"
    return "ahocorasick-rs"


class KeywordGate:
    """``found(text)``: the indexes (into ``words``) of the words that occur in ``text``.
    Words are matched as given (case-sensitive): callers pass lower-case words and
    lower-case text."""

    def __init__(self, words: Iterable[str], *, use: str | None = None) -> None:
        self.words = tuple(dict.fromkeys(w for w in words if w))
        self.backend = use or backend()
        if self.backend == "ahocorasick-rs":
            import ahocorasick_rs

            automaton = ahocorasick_rs.AhoCorasick(list(self.words))
            find = automaton.find_matches_as_indexes

            def found(text: str) -> set[int]:
                try:
                    matches = find(text, overlapping=True)
                except UnicodeEncodeError:  # a lone surrogate (undecodable bytes) is no part of a word
                    matches = find(_SURROGATE.sub("\ufffd", text), overlapping=True)
                return {match[0] for match in matches} if matches else _NONE
        else:
            index = {word: i for i, word in enumerate(self.words)}
            # finditer finds the longest word at each position it tries and goes on after it.
            # A word that starts where a found one starts, or lies inside it, is implied by it;
            # one that starts inside it and runs past its end is checked with startswith.
            implied = {w: tuple(index[v] for v in self.words if v in w) for w in self.words}
            overlaps = {w: tuple((k, v, index[v]) for k in range(1, len(w)) for v in self.words
                                 if len(v) > len(w) - k and v.startswith(w[k:])) for w in self.words}
            finder = re.compile(_trie(self.words)) if self.words else None

            def found(text: str) -> set[int]:
                if finder is None:
                    return set()
                out: set[int] = set()
                for match in finder.finditer(text):
                    word = match.group()
                    out.update(implied[word])
                    for k, other, i in overlaps[word]:
                        if i not in out and text.startswith(other, match.start() + k):
                            out.add(i)
                return out
        self.found = found


def _trie(words: Iterable[str]) -> str:
    """A regex matching the longest of ``words`` at a position, written as a trie."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alternatives = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return emit(trie)
