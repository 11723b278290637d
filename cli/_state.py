"""Options every command shares, resolved lazily so `--help` stays fast."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcmem.kb.config import Config
    from hpcmem.kb.store.stack import StoreStack

# Commands that store new data: on first use they may create the user store (see
# kb/store/stack.py). Every other command only opens stores; `db upgrade` creates its own.
ADDING_COMMANDS = ("record", "ingest", "learn", "revalidate", "env snapshot", "lessons import", "mcp")


@dataclass
class State:
    config_file: str | None = None
    store_url: str | None = None
    debug: bool = False
    _config: "Config | None" = field(default=None, repr=False)
    _stack: "StoreStack | None" = field(default=None, repr=False)

    def reset(self, *, debug: bool, config_file: str | None, store_url: str | None) -> None:
        """Start a new invocation (tests run many in one process)."""
        if self._stack is not None:
            self._stack.dispose()
        self.debug, self.config_file, self.store_url = debug, config_file, store_url
        self._config = self._stack = None

    def cli_overrides(self) -> dict[str, Any]:
        return {"stores": {"user": {"url": self.store_url}}} if self.store_url else {}

    @property
    def config(self) -> "Config":
        if self._config is None:
            from hpcmem.kb.config import load_config

            from hpcmem.kb.signatures.rules_digest import use_site_rules

            self._config = load_config(cli_overrides=self.cli_overrides(), config_file=self.config_file)
            rules_file = str(self._config.get("signatures.rules_file") or "").strip()
            use_site_rules(os.path.expanduser(rules_file) if rules_file else None)
        return self._config

    @property
    def stack(self) -> "StoreStack":
        if self._stack is None:
            from hpcmem.kb.store.stack import StoreStack

            self._stack = StoreStack.from_config(self.config, adding=self._adds_data())
        return self._stack

    def _adds_data(self) -> bool | None:
        """Whether this command line's command stores new data (None: no command line)."""
        words = command_words(sys.argv[1:])  # e.g. ["lessons", "list"]
        if not words:
            return None  # a library or test caller: as before
        if words[0] in ADDING_COMMANDS or " ".join(words) in ADDING_COMMANDS:
            return True
        # recall first stores the epilog's pending events for this user: their own failed jobs
        return words[0] == "recall" and self._epilog_events_waiting()

    def _epilog_events_waiting(self) -> bool:
        import pwd

        from hpcmem.ingest.spool import has_pending
        from hpcmem.kb.errors import HpcmemError

        spool = self.config.get("spool.dir")
        try:
            return bool(spool) and has_pending(spool, pwd.getpwuid(os.getuid()).pw_name)
        except HpcmemError:
            return False  # the drain itself reports the spool it cannot read


def command_words(argv: list[str]) -> list[str]:
    """The command and the next word of a command line (["lessons", "list"]), or []."""
    from hpcmem.cli.main import _VALUE_OPTIONS, COMMANDS

    words, i = [], 0
    while i < len(argv) and len(words) < 2:
        if not words and argv[i] in _VALUE_OPTIONS:
            i += 2  # a root option's value is not the command
            continue
        if not argv[i].startswith("-"):
            words.append(argv[i])
        i += 1
    return words if words and words[0] in COMMANDS else []


STATE = State()
