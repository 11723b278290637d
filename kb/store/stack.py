"""The store stack a caller sees: their user store, their lab stores, the cluster store.

Recall reads every store of the stack; writes go to the user store unless a scope is
named. The stack is declared by configuration (see ``hpcmem.kb.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcmem.kb.config import Config
from hpcmem.kb.errors import ConfigError, NotFound
from hpcmem.kb.store.database import Store


@dataclass
class StoreStack:
    user: Store
    labs: list[Store] = field(default_factory=list)
    cluster: Store | None = None

    @classmethod
    def from_config(cls, config: Config) -> "StoreStack":
        def build(settings: dict, name: str, scope: str) -> Store:
            url = settings.get("url")
            if not url:
                raise ConfigError(f"store '{name}' has no url (key stores.{scope if scope != 'lab' else 'labs.' + name}.url)")
            return Store(url, name=name, scope=scope, schema=settings.get("schema"),
                         journal_mode=settings.get("journal_mode"))

        stores = config.get("stores", {})
        user = build(stores.get("user", {}), "user", "user")
        labs = [build(s, name, "lab") for name, s in sorted(stores.get("labs", {}).items())]
        cluster_cfg = stores.get("cluster") or {}
        cluster = build(cluster_cfg, "cluster", "cluster") if cluster_cfg.get("url") else None
        return cls(user=user, labs=labs, cluster=cluster)

    def all(self) -> list[Store]:
        """Stores in precedence order: user, labs, cluster."""
        return [self.user, *self.labs, *([self.cluster] if self.cluster else [])]

    def by_scope(self, scope: str) -> Store:
        """'user', 'cluster', 'lab' (when exactly one lab) or 'lab:NAME'."""
        if scope == "user":
            return self.user
        if scope == "cluster":
            if self.cluster is None:
                raise NotFound("no cluster store is configured", hint="set stores.cluster.url in the site config")
            return self.cluster
        kind, _, name = scope.partition(":")
        if kind == "lab":
            if not name and len(self.labs) == 1:
                return self.labs[0]
            for lab in self.labs:
                if lab.name == name:
                    return lab
            known = ", ".join(f"lab:{lab.name}" for lab in self.labs) or "none configured"
            raise NotFound(f"no lab store '{name}' (known: {known})")
        raise NotFound(f"unknown scope '{scope}': use user, lab:NAME or cluster")

    def dispose(self) -> None:
        for store in self.all():
            store.dispose()


def describe_stack(stack: StoreStack) -> list:
    """StoreInfo for each store: the user store is opened (created, migrated); the rest only probed."""
    stack.user.open()
    infos = [stack.user.info()]
    infos += [store.info(probe_only=True) for store in stack.all()[1:]]
    return infos
