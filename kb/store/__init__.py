"""The store: one database (SQLite or PostgreSQL) holding one scope's knowledge.

- ``database``       open a store and keep it at the current schema (``Store``);
- ``models``, ``column_types``, ``migrations/``, ``migrate``, ``schema_version``: the schema;
- ``reader``, ``sqlwrite``: plain DB-API reads and writes for the hot paths (no ORM import);
- ``stack``          the stores a caller sees: user, labs, cluster;
- ``access``, ``fsinfo``: who may read a shared store; which journal mode a filesystem allows;
- ``refingerprint``  recompute a store's fingerprints when the rules change;
- ``index_keys``     the store_meta keys that make its vector indexes catch up.

May import ``signatures`` (a store records the rules its fingerprints follow), ``safety``
and the top of ``kb``.
"""
