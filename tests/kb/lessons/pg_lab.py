"""A real PostgreSQL lab store with a member (bob) and a lead (lena), each a login role
granted the lab's group role by ``kb/store/access.py``; everything is dropped afterwards."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hpcmem.kb.store.stack import StoreStack


@contextmanager
def member_and_lead(pg_schema: tuple[str, str], tmp_path: Path, prefix: str) -> Iterator[tuple[StoreStack, StoreStack]]:
    """(bob's stack, lena's stack): each a user store of their own and the lab store 'vision'."""
    import psycopg

    from hpcmem.kb.store.access import setup_pg_roles
    from hpcmem.kb.store.database import Store

    url, schema = pg_schema
    Store(url, name="vision", scope="lab", schema=schema).open().dispose()
    tag = uuid.uuid4().hex[:8]
    group = {"read": f"{prefix}_{tag}_read", "member": f"{prefix}_{tag}_member", "lead": f"{prefix}_{tag}_lead"}
    logins = {"bob": f"bob_{prefix}_{tag}", "lena": f"lena_{prefix}_{tag}"}
    setup_pg_roles(url, schema, lab_or_cluster="lab", readers_role=group["read"], members_role=group["member"],
                   leads_role=group["lead"])
    with psycopg.connect(url, autocommit=True) as conn:
        for login, role in ((logins["bob"], group["member"]), (logins["lena"], group["lead"])):
            conn.execute(f'CREATE ROLE "{login}" LOGIN')
            conn.execute(f'GRANT "{role}" TO "{login}"')

    def stack_of(login: str) -> StoreStack:
        host = url.split("://", 1)[1].split("@", 1)[1]
        user = Store(f"sqlite:///{tmp_path / login / 'user.db'}", name="user", scope="user")
        user.open()
        return StoreStack(user=user, labs=[Store(f"postgresql://{login}@{host}", name="vision", scope="lab",
                                                 schema=schema)])

    bob, lena = stack_of(logins["bob"]), stack_of(logins["lena"])
    try:
        yield bob, lena
    finally:
        for stack in (bob, lena):
            stack.dispose()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            for name in [*logins.values(), *group.values()]:
                conn.execute(f'DROP OWNED BY "{name}" CASCADE')
                conn.execute(f'DROP ROLE "{name}"')
