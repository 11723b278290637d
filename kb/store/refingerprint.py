"""Recompute a store's fingerprints under the rules in effect (`hpcmem db refingerprint`).

When a release or a site's rules file changes the fingerprint rules (``kb/signatures/rules_digest.py``),
the fingerprints a store holds stop being what this code computes for the same text, and
recall's exact and alias matches silently stop. This brings them back, in one transaction:

- each lesson's signature from its excerpt (a lesson without one is kept and reported);
  when it changes, the old fingerprint stays as an alias of the lesson without excerpt
  (source ``refingerprint``): the stored excerpt is masked, and for about one lesson in
  eight masking loses what the rules read (a kept symbol, a number a rule matches), so
  the raw text of the failure may still compute the old fingerprint;
- each alias from its excerpt; an alias equal to its lesson's fingerprint or to another
  alias of the lesson is dropped; aliases without an excerpt are kept;
- each occurrence from the text the recorder fingerprinted (its message, else its log
  excerpt), memoised per text, written with batched plain SQL;
- signature rows: a fingerprint nobody has yet takes over the row it mostly comes from
  (renamed, its vector cleared) or gets a new row; rows whose fingerprint no longer
  occurs are merged into where their occurrences and lessons went (counts summed,
  first/last seen min/max) and deleted. Vectors of renamed and new rows are filled by the
  usual embed path (``embed.embed_new_lessons``); the index generations are bumped so
  every index rebuilds;
- store_meta ``signatures.rules_digest`` is set to the current digest.

Every text is fingerprinted as record and recall fingerprint theirs: normalised, then
redacted with today's rules (``fingerprint.signature_text``; the redaction's files are part
of the digest).

A second run changes nothing. ``dry_run`` does all of it and rolls back.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from hpcmem.kb.errors import StoreError
from hpcmem.kb.store.sqlwrite import SqlWriter

ID_CHUNK = 500
ALIAS_SOURCE = "refingerprint"


@dataclass
class RefingerprintReport:
    store: str
    dry_run: bool
    digest_before: str | None
    digest: str
    lessons: int = 0
    lessons_changed: int = 0
    lessons_without_excerpt: list[str] = field(default_factory=list)
    aliases: int = 0
    aliases_changed: int = 0
    aliases_dropped: int = 0
    old_fingerprints_kept: int = 0
    occurrences: int = 0
    occurrences_changed: int = 0
    signatures: int = 0
    signatures_new: int = 0
    signatures_renamed: int = 0
    signatures_merged: int = 0
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.lessons_changed or self.aliases_changed or self.aliases_dropped or self.old_fingerprints_kept
                    or self.occurrences_changed or self.signatures_new or self.signatures_renamed
                    or self.signatures_merged)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}

    def summary(self) -> str:
        verb = "would change" if self.dry_run else "changed"
        text = (f"{self.store}: {verb} {self.lessons_changed}/{self.lessons} lessons, "
                f"{self.aliases_changed + self.aliases_dropped}/{self.aliases} aliases "
                f"({self.aliases_dropped} dropped), {self.occurrences_changed}/{self.occurrences} occurrences; "
                f"signatures: {self.signatures_new} new, {self.signatures_renamed} renamed, "
                f"{self.signatures_merged} merged ({self.seconds:.2f} s)")
        if self.lessons_without_excerpt:
            text += f"; {len(self.lessons_without_excerpt)} lesson(s) without excerpt kept as they are"
        return text


def _chunks(items: list, size: int = ID_CHUNK):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def refingerprint(store: Any, *, dry_run: bool = False, actor: str = "hpcmem", rules=None) -> RefingerprintReport:
    """Recompute ``store``'s fingerprints under ``rules`` (default: the rules in effect)."""
    from hpcmem.kb.signatures.rules_digest import DIGEST_KEY, active_rules, current_digest, rules_digest, site_rules_path

    if rules is None:
        rules = active_rules()
        digest = current_digest()
    else:
        digest = rules_digest(site_rules_path())
    store.open(create=False)
    started = time.perf_counter()
    raw = store.engine.raw_connection()
    try:
        conn = raw.driver_connection
        db = SqlWriter(conn, store.dialect)
        if store.dialect == "sqlite":
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: recorders wait, nobody deadlocks
        else:
            # Recorders insert signatures and occurrences; readers go on reading.
            db.execute("LOCK TABLE signatures, occurrences, lessons, lesson_aliases IN SHARE ROW EXCLUSIVE MODE")
        before = db.query("SELECT value FROM store_meta WHERE key = ?", (DIGEST_KEY,))
        report = RefingerprintReport(store.name, dry_run, before[0][0] if before else None, digest)
        _Run(db, rules, report, actor).apply()
        db.execute("INSERT INTO store_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = ?",
               (DIGEST_KEY, digest, digest))
        report.seconds = round(time.perf_counter() - started, 3)
        if dry_run:
            raw.rollback()
        else:
            raw.commit()
        return report
    except BaseException as exc:
        raw.rollback()
        if isinstance(exc, Exception) and not isinstance(exc, StoreError) and _is_db_error(exc):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"refingerprint of store '{store.name}' failed, nothing was changed: {first}") from None
        raise
    finally:
        raw.close()


def _is_db_error(exc: Exception) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("sqlite3", "psycopg", "sqlalchemy"))


class _Run:
    def __init__(self, db: SqlWriter, rules, report: RefingerprintReport, actor: str) -> None:
        from hpcmem.kb.signatures.fingerprint import signature_of_block, signature_text

        self.db, self.rules, self.report, self.actor = db, rules, report, actor
        self._memo: dict[str, Any] = {}
        self._signature_of_block = signature_of_block
        self._signature_text = signature_text

    def sig(self, text: str):
        """The signature of a stored text as record and recall compute it today: normalised
        and redacted with the current rules first (a store an older hpcmem wrote may hold
        what they remove)."""
        found = self._memo.get(text)
        if found is None:
            found = self._memo[text] = self._signature_of_block(self._signature_text(text), self.rules)
        return found

    # -------------------------------------------------------------------------------- plan
    def apply(self) -> None:
        db, report = self.db, self.report
        sigs = {sid: (fp, template, category) for sid, fp, template, category in
                db.query("SELECT id, fingerprint, template, category FROM signatures")}
        report.signatures = len(sigs)
        new_sigs: dict[str, tuple[str, str]] = {}  # fingerprint -> (template, category)

        # Occurrences: where each goes (only the ones that move are kept by id).
        occ_dest: dict[int, Counter] = defaultdict(Counter)  # old sid -> new fp -> n
        occ_moves: dict[tuple[int, str], list[int]] = defaultdict(list)
        for oid, sid, message, log_excerpt, state in db.stream(
                "SELECT id, signature_id, message, log_excerpt, state FROM occurrences "
                "WHERE signature_id IS NOT NULL ORDER BY id"):
            report.occurrences += 1
            if sid not in sigs:
                continue
            new = self.sig(message or log_excerpt or f"job state {state or 'FAILED'}")
            new_sigs.setdefault(new.fingerprint, (new.template, new.category))
            occ_dest[sid][new.fingerprint] += 1
            if new.fingerprint != sigs[sid][0]:
                occ_moves[(sid, new.fingerprint)].append(oid)
        report.occurrences_changed = sum(len(v) for v in occ_moves.values())

        # Lessons: from their excerpts.
        lesson_rows = db.query("SELECT id, fingerprint, signature_id, excerpt FROM lessons ORDER BY id")
        report.lessons = len(lesson_rows)
        les_dest: dict[int | None, Counter] = defaultdict(Counter)
        lesson_final: dict[str, str] = {}  # lesson id -> its fingerprint after the run
        lesson_changes: list[tuple[str, str, int | None, str]] = []  # (id, old fp, old sid, new fp)
        for lid, fp, sid, excerpt in lesson_rows:
            if not (excerpt or "").strip():
                report.lessons_without_excerpt.append(lid)
                lesson_final[lid] = fp
                if sid is not None:
                    les_dest[sid][sigs[sid][0] if sid in sigs else fp] += 1
                continue
            new = self.sig(excerpt)
            new_sigs.setdefault(new.fingerprint, (new.template, new.category))
            lesson_final[lid] = new.fingerprint
            les_dest[sid][new.fingerprint] += 1
            current_fp = sigs[sid][0] if sid in sigs else None
            if new.fingerprint != fp or current_fp != new.fingerprint:
                lesson_changes.append((lid, fp, sid, new.fingerprint))
        report.lessons_changed = sum(1 for _, old, _, new in lesson_changes if old != new)

        # Which row each needed fingerprint lives in.
        needed: set[str] = set()
        for dest in (*occ_dest.values(), *les_dest.values()):
            needed.update(dest)
        by_fp = {fp: sid for sid, (fp, _, _) in sigs.items()}
        target: dict[str, int] = {fp: by_fp[fp] for fp in needed if fp in by_fp}
        renames: dict[int, str] = {}
        inserts: list[str] = []
        for fp in sorted(needed - set(target)):
            donors = [(-(occ_dest[sid][fp] + les_dest[sid][fp]), sid) for sid in set(occ_dest) | set(les_dest)
                      if sid in sigs and sigs[sid][0] not in needed and sid not in renames
                      and occ_dest[sid][fp] + les_dest[sid][fp] > 0]
            if donors:
                sid = min(donors)[1]
                renames[sid] = fp
                target[fp] = sid
            else:
                inserts.append(fp)
        referenced = {sid for sid in (*occ_dest, *les_dest) if sid in sigs}
        merged = sorted(sid for sid in referenced if sigs[sid][0] not in needed and sid not in renames)

        self._write_signatures(sigs, new_sigs, target, renames, inserts)
        # contributors of each target row (for counts and first/last seen)
        contributors: dict[int, set[int]] = defaultdict(set)
        for sid in referenced:
            for fp in (*occ_dest[sid], *les_dest[sid]):
                contributors[target[fp]].add(sid)
        self._move_occurrences(occ_moves, target)
        self._move_lessons(lesson_changes, target, sigs)
        self._refit_aliases(lesson_final, {lid: (old, sid) for lid, old, sid, new in lesson_changes if old != new},
                            sigs)
        self._merge_counts(sigs, occ_dest, les_dest, occ_moves, target, merged, contributors)
        if merged:
            for chunk in _chunks(merged):
                self.db.execute(f"DELETE FROM signatures WHERE id IN ({', '.join('?' * len(chunk))})", tuple(chunk))
        report.signatures_new = len(inserts)
        report.signatures_renamed = len(renames)
        report.signatures_merged = len(merged)
        if inserts or renames or merged:
            self._bump_index_generations()

    # -------------------------------------------------------------------------------- writes
    def _write_signatures(self, sigs, new_sigs, target, renames, inserts) -> None:
        db = self.db
        if renames:
            # Two steps, so a row may take a fingerprint another renamed row gives up.
            db.executemany("UPDATE signatures SET fingerprint = ? WHERE id = ?",
                    [(f"~refingerprint:{sid}", sid) for sid in renames])
            db.executemany("UPDATE signatures SET fingerprint = ?, template = ?, category = ?, embedding = NULL, "
                    "embedding_model = NULL, embedding_hash = NULL WHERE id = ?",
                    [(fp, *new_sigs[fp], sid) for sid, fp in sorted(renames.items())])
        if inserts:
            from hpcmem.kb.store.sqlwrite import time_binder

            now = time_binder(db.dialect)(dt.datetime.now(dt.timezone.utc))
            db.executemany("INSERT INTO signatures (fingerprint, category, template, first_seen, last_seen, count) "
                    "VALUES (?, ?, ?, ?, ?, 0)",
                    [(fp, new_sigs[fp][1], new_sigs[fp][0], now, now) for fp in inserts])
            for chunk in _chunks(inserts):
                for sid, fp in db.query(f"SELECT id, fingerprint FROM signatures WHERE fingerprint IN "
                                       f"({', '.join('?' * len(chunk))})", tuple(chunk)):
                    target[fp] = sid

    def _move_occurrences(self, occ_moves, target) -> None:
        for (_old, fp), ids in occ_moves.items():
            for chunk in _chunks(ids):
                self.db.execute(f"UPDATE occurrences SET signature_id = ? WHERE id IN ({', '.join('?' * len(chunk))})",
                            (target[fp], *chunk))

    def _move_lessons(self, lesson_changes, target, sigs) -> None:
        self.db.executemany("UPDATE lessons SET fingerprint = ?, signature_id = ? WHERE id = ?",
                     [(new, target[new], lid) for lid, _old, _sid, new in lesson_changes])
        self._audit([(lid, "refingerprint", {"fingerprint": old}, {"fingerprint": new})
                     for lid, old, _sid, new in lesson_changes if old != new])

    def _refit_aliases(self, lesson_final: dict[str, str], changed: dict[str, tuple[str, int | None]], sigs) -> None:
        db, report = self.db, self.report
        rows = db.query("SELECT id, lesson_id, fingerprint, template, category, excerpt FROM lesson_aliases ORDER BY id")
        report.aliases = len(rows)
        seen: dict[str, set[str]] = {lid: {fp} for lid, fp in lesson_final.items()}
        drop, update = [], []
        for aid, lid, fp, template, category, excerpt in rows:
            if (excerpt or "").strip():
                new = self.sig(excerpt)
                values = (new.fingerprint, new.template, new.category)
            else:
                values = (fp, template, category)
            taken = seen.setdefault(lid, set())
            if values[0] in taken:
                drop.append((aid, lid, fp))
                continue
            taken.add(values[0])
            if values != (fp, template, category):
                update.append((aid, lid, fp, values))
        for chunk in _chunks([a for a, _, _ in drop]):
            db.execute(f"DELETE FROM lesson_aliases WHERE id IN ({', '.join('?' * len(chunk))})", tuple(chunk))
        if update:
            db.executemany("UPDATE lesson_aliases SET fingerprint = ? WHERE id = ?",
                    [(f"~refingerprint:{aid}", aid) for aid, *_ in update])
            db.executemany("UPDATE lesson_aliases SET fingerprint = ?, template = ?, category = ? WHERE id = ?",
                    [(*values, aid) for aid, _lid, _fp, values in update])
        # A changed lesson keeps its old fingerprint as an alias (see the module docstring).
        from hpcmem.kb.store.sqlwrite import time_binder

        now = time_binder(db.dialect)(dt.datetime.now(dt.timezone.utc))
        kept = []
        for lid, (old, sid) in sorted(changed.items()):
            if old in seen[lid] or sid not in sigs or sigs[sid][0] != old:
                continue  # already known, or its template is not known
            seen[lid].add(old)
            kept.append((lid, old, sigs[sid][1], sigs[sid][2], ALIAS_SOURCE, self.actor, now))
        db.executemany("INSERT INTO lesson_aliases (lesson_id, fingerprint, template, category, excerpt, source, actor, "
                "created_at) VALUES (?, ?, ?, ?, NULL, ?, ?, ?)", kept)
        report.aliases_dropped = len(drop)
        report.aliases_changed = len(update)
        report.old_fingerprints_kept = len(kept)
        audits = [(lid, "alias:remove", {"fingerprint": fp}, None) for _aid, lid, fp in drop]
        audits += [(lid, "alias:refingerprint", {"fingerprint": fp}, {"fingerprint": values[0]})
                   for _aid, lid, fp, values in update]
        self._audit(audits)

    def _merge_counts(self, sigs, occ_dest, les_dest, occ_moves, target, merged, contributors) -> None:
        """count: occurrences moved in added, moved out taken off; a merged row's count
        beyond its occurrences (older data) goes with most of them. first/last seen:
        min/max over the row and the rows that gave it occurrences or lessons."""
        db = self.db
        counts = dict(db.query("SELECT id, count FROM signatures"))
        delta: Counter = Counter()
        for (old, fp), ids in occ_moves.items():
            delta[old] -= len(ids)
            delta[target[fp]] += len(ids)
        for sid in merged:
            rest = (counts.get(sid) or 0) + delta[sid]
            gone_to = occ_dest[sid] or les_dest[sid]
            if rest and gone_to:
                primary = max(gone_to.items(), key=lambda item: (item[1], item[0]))[0]
                delta[target[primary]] += rest
        updates = [((counts.get(sid) or 0) + change, sid) for sid, change in delta.items()
                   if change and sid not in merged]
        db.executemany("UPDATE signatures SET count = ? WHERE id = ?", updates)
        for sid, sources in contributors.items():
            others = sorted(sources - {sid})
            if not others:
                continue
            ids = (sid, *others)
            marks = ", ".join("?" * len(ids))
            db.execute(f"UPDATE signatures SET first_seen = (SELECT min(first_seen) FROM signatures WHERE id IN ({marks})), "
                   f"last_seen = (SELECT max(last_seen) FROM signatures WHERE id IN ({marks})) WHERE id = ?",
                   (*ids, *ids, sid))

    def _bump_index_generations(self) -> None:
        """As ``embed.bump_rebuild_generation``: every index of this store rebuilds."""
        from hpcmem.kb.store.index_keys import GENERATION_KEY, REBUILD_GENERATION_KEY

        cast = "CAST(CAST(store_meta.value AS INTEGER) + 1 AS TEXT)"
        for key in (GENERATION_KEY, REBUILD_GENERATION_KEY):
            self.db.execute(f"INSERT INTO store_meta (key, value) VALUES (?, '1') "
                        f"ON CONFLICT (key) DO UPDATE SET value = {cast}", (key,))

    def _audit(self, entries: list[tuple[str, str, dict | None, dict | None]]) -> None:
        if not entries:
            return
        from hpcmem.kb.store.sqlwrite import json_binder, time_binder

        as_json, now = json_binder(self.db.dialect), time_binder(self.db.dialect)(dt.datetime.now(dt.timezone.utc))
        self.db.executemany("INSERT INTO audit_log (at, actor, action, object_type, object_id, before, after, reason) "
                     "VALUES (?, ?, ?, 'lesson', ?, ?, ?, ?)",
                     [(now, self.actor, action, lid, as_json(before), as_json(after),
                       "fingerprint rules changed (hpcmem db refingerprint)") for lid, action, before, after in entries])
