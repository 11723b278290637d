"""Errors the library raises. Each message says what went wrong and what to do next.

The CLI maps every HpcmemError to one line on stderr and exit status 2; anything else
is a bug and keeps its traceback.
"""


class HpcmemError(Exception):
    """Base class of every error a user can cause and fix."""

    hint: str | None = None

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class InputError(HpcmemError):
    """Malformed input: a file, an argument or a value that cannot be used."""


class ConfigError(HpcmemError):
    """A configuration file or setting is invalid."""


class StoreError(HpcmemError):
    """A store cannot be opened, reached, migrated or written."""


class UnsafeStoreError(StoreError):
    """A store's file permissions would expose it to other users."""


class NotFound(HpcmemError):
    """A requested record (lesson, job, snapshot) does not exist."""


class PermissionDenied(HpcmemError):
    """The database refused a change: the caller's role may not make it in that store."""
