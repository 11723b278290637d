"""A fresh user store for recall tests that record lessons and ask through the library."""

from __future__ import annotations

import pytest

from hpcmem.kb.config import load_config
from hpcmem.kb.store.stack import StoreStack


@pytest.fixture()
def stack(tmp_path):
    """(the store stack, its config) of a new HPCMEM_HOME; test_recall.py has its own."""
    config = load_config(environ={"HPCMEM_HOME": str(tmp_path), "HPCMEM_DISABLE_LOCAL_CONFIG": "1"})
    stack = StoreStack.from_config(config)
    yield stack, config
    stack.dispose()
