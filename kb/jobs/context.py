"""A failed job's context: what it asked for, what it used, how it was submitted, and the
cluster's environment when it failed.

The one home for job context, read by recall's built-in advice (``recall.advice``) and meant
for the scorer too (issue 26: context as evidence). It sits in ``jobs`` - below ``lessons`` and
``recall`` - so the stages that capture context (ingest, ``record``, ``learn``) and the ones
that judge by it share one definition.

``Facts.occurrence`` holds an occurrence's fields as the store keeps them (``req_mem_mb``,
``max_rss_mb``, ``req_cpus``, ``req_time_s``, ``elapsed_s``, ``partition``, ``submit_line``,
``template``, ...); ``Facts.env`` an environment snapshot's dict (``partitions``, ``modules``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Facts:
    """What advice may read: the occurrence's fields and the environment."""

    occurrence: dict[str, Any]
    env: dict[str, Any]

    def get(self, key: str) -> Any:
        return self.occurrence.get(key)

    @property
    def text(self) -> str:
        for key in ("template", "message", "log_excerpt"):
            if self.occurrence.get(key):
                return str(self.occurrence[key])
        return ""

    @property
    def partitions(self) -> dict[str, dict[str, Any]]:
        parts = self.env.get("partitions") or {}
        return {str(k): v for k, v in parts.items() if isinstance(v, dict)}

    @property
    def modules(self) -> dict[str, dict[str, Any]]:
        mods = self.env.get("modules") or {}
        return {str(k): v for k, v in mods.items() if isinstance(v, dict)}

    def default_partition(self) -> str | None:
        return next((n for n, p in self.partitions.items() if p.get("is_default") or p.get("default") is True), None)

    def submit_option(self, option: str) -> str | None:
        found = re.search(rf"(?:^|\s){re.escape(option)}(?:=|\s+)(\S+)", self.get("submit_line") or "")
        return found.group(1) if found else None
