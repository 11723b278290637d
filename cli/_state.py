"""Options every command shares, resolved lazily so `--help` stays fast."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcmem.kb.config import Config
    from hpcmem.kb.store.stack import StoreStack


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

            self._stack = StoreStack.from_config(self.config)
        return self._stack


STATE = State()
