"""The store stack a caller sees: their user store, their lab stores, the cluster store.

Recall reads every store of the stack; writes go to the user store unless a scope is
named. The stack is declared by configuration (see ``hpcmem.kb.config``).

Which stores a command may create when they are not there (``Store.if_missing``): one that
only reads creates none (the default user store, never written yet, reads as empty; a
store the user named is an error); one that stores something creates the user store - at
its default place with its directory, at a path the user named only inside an existing
directory. Lab and cluster stores are made by `hpcmem db upgrade --scope`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcmem.kb.config import Config
from hpcmem.kb.errors import ConfigError, NotFound
from hpcmem.kb.store.database import CREATE, CREATE_FILE, NOT_YET, REFUSE, Store


@dataclass
class StoreStack:
    user: Store
    labs: list[Store] = field(default_factory=list)
    cluster: Store | None = None

    @classmethod
    def from_config(cls, config: Config, *, adding: bool | None = None) -> "StoreStack":
        """``adding``: whether the command stores new data (and so may create the user
        store); None keeps every store creatable, as library callers expect."""
        named = config.origins.get("stores.user.url", "builtin") != "builtin"  # --store, env or a file

        def if_missing(scope: str) -> str:
            if adding is None:
                return CREATE
            if scope != "user":
                return REFUSE
            if adding:
                return CREATE_FILE if named else CREATE
            return REFUSE if named else NOT_YET

        def build(settings: dict, name: str, scope: str) -> Store:
            url = settings.get("url")
            if not url:
                raise ConfigError(f"store '{name}' has no url (key stores.{scope if scope != 'lab' else 'labs.' + name}.url)")
            return Store(url, name=name, scope=scope, schema=settings.get("schema"),
                         journal_mode=settings.get("journal_mode"), if_missing=if_missing(scope),
                         leads=tuple(settings.get("leads") or ()))

        stores = config.get("stores", {})
        user = build(stores.get("user", {}), "user", "user")
        if user.if_missing == NOT_YET and config.dirs is not None:
            from hpcmem.kb.store.schema_version import SCHEMA_HEAD

            user.empty_template = config.dirs.cache / "empty-store" / f"{SCHEMA_HEAD}.db"
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
    """StoreInfo for each store, creating none. The user store must work (every command
    needs it): migrated when behind; damaged, or named but not there, it is an error. The
    others are only probed: one that is missing or damaged is listed with the reason."""
    user = stack.user
    if user.exists():
        user.open(create=False)
    elif user.if_missing == REFUSE:
        raise user.missing_error()
    return [store.info(probe_only=True) for store in stack.all()]
