"""Which redaction rules a store's text was redacted under (store_meta ``redaction.rules_digest``).

Every path into a store redacts with the rules of the hpcmem that wrote it
(``kb.safety.redact.rules_digest()``: gitleaks' config digest and the HPC rules' version). A
new store records the digest of the rules it starts with, and ``hpcmem db scrub`` records
the digest it re-redacted everything under. When the recorded digest differs from the
running hpcmem's (a release brought new rules, or the gitleaks wheel went missing or came
back), rows written before may hold a secret today's rules would catch: ``hpcmem doctor``
says so and names ``hpcmem db scrub``. A store that has rows and no digest was written
before hpcmem recorded one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RedactionState", "write_redaction_digest", "record_redaction_digest", "redaction_state"]

# Tables that hold redacted text: one row in any of them means there is text to judge.
_TEXT_TABLES = ("lessons", "occurrences", "job_records", "audit_log")


def write_redaction_digest(conn, digest: str | None = None) -> None:  # noqa: ANN001 - a Connection
    """Record the redaction rules' digest inside the caller's transaction."""
    from sqlalchemy import text

    from hpcmem.kb.safety.redact import DIGEST_KEY, rules_digest

    conn.execute(
        text("INSERT INTO store_meta (key, value) VALUES (:k, :v) ON CONFLICT (key) DO UPDATE SET value = :v"),
        {"k": DIGEST_KEY, "v": digest or rules_digest()},
    )


def record_redaction_digest(store) -> None:  # noqa: ANN001 - a hpcmem.kb.store.database.Store
    """Record the current digest in its own transaction (after ``db scrub``)."""
    with store.engine.begin() as conn:
        write_redaction_digest(conn)


@dataclass(frozen=True)
class RedactionState:
    recorded: str | None  # the digest the store holds, None when it holds none
    current: str  # this hpcmem's
    has_text: bool  # any row in a table that holds redacted text

    @property
    def stale(self) -> bool:
        """Rows may hold what today's rules would redact: ``hpcmem db scrub`` is due."""
        return self.recorded != self.current and (self.recorded is not None or self.has_text)


def redaction_state(store) -> RedactionState:  # noqa: ANN001 - an opened or existing Store
    """What the store records and whether it holds text (reads only)."""
    from sqlalchemy import text

    from hpcmem.kb.safety.redact import DIGEST_KEY, rules_digest

    with store.engine.connect() as conn:
        recorded = conn.execute(text("SELECT value FROM store_meta WHERE key = :k"), {"k": DIGEST_KEY}).scalar()
        has_text = any(conn.execute(text(f"SELECT 1 FROM {table} LIMIT 1")).first() is not None
                       for table in _TEXT_TABLES)
    return RedactionState(recorded, rules_digest(), has_text)
