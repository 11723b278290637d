"""The schema revision this hpcmem expects.

Kept apart from Alembic so opening a store can check its version with one plain query
and import Alembic (about 0.5 s) only when an upgrade is really needed.
``tests/kb/store/test_migrations.py`` checks that this equals Alembic's single head.
"""

SCHEMA_HEAD = "0009"
ALL_REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009")
