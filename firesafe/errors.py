"""Every exception firesafe raises or understands.

User mistakes raise a subclass of :class:`FiresafeError` with a message meant for people; the CLI
prints that message without a traceback.
"""

from __future__ import annotations


class FiresafeError(Exception):
    """Base class of every error firesafe raises on purpose."""


class ConfigError(FiresafeError):
    """The application, a job declaration or a store URL is not valid."""


class InvalidInput(FiresafeError, ValueError):
    """An argument given to firesafe is not acceptable (nothing was stored)."""


class IdempotencyConflict(FiresafeError):
    """The key exists already, with other arguments (or another job name)."""

    def __init__(self, key: str, existing_name: str, name: str) -> None:
        self.key = key
        if existing_name != name:
            detail = f"it belongs to job {existing_name!r}, not {name!r}"
        else:
            detail = "it was enqueued with different arguments"
        super().__init__(f"key {key!r} is already taken: {detail}")


class StoreError(FiresafeError):
    """The store cannot be opened or used (unreachable, unreadable, corrupt, full)."""


class StoreDataError(StoreError):
    """The store refused what it was given to write (text it cannot encode, a NUL in PostgreSQL
    text): the fault is in that data, not in the store, so retrying the same write cannot help.
    Nothing of the refused transaction was kept."""


class SchemaTooNew(StoreError):
    """A newer firesafe migrated the store: this one refuses to read or write it, whatever it would
    do (migrate, run workers, enqueue, serve the dashboard)."""

    def __init__(self, where: str, version: int, supported: int) -> None:
        self.version = version
        self.supported = supported
        super().__init__(f"the store at {where} has schema version {version}, newer than this firesafe "
                         f"supports ({supported}): upgrade firesafe, or use the version that migrated it")


class OtherTables(StoreError):
    """A SQLite file holds tables that are not firesafe's (another application's): firesafe does not
    add its own beside them unless told to (``migrate(allow_other_tables=True)``)."""

    def __init__(self, path: str, tables: list[str]) -> None:
        self.tables = tables
        shown = ", ".join(t if t.isidentifier() else repr(t) for t in tables[:5])
        shown += f" and {len(tables) - 5} more" if len(tables) > 5 else ""
        super().__init__(f"{path} holds tables that are not firesafe's ({shown}); firesafe adds its tables "
                         "to another application's file only when told to: give firesafe a file of its own, "
                         "or run `firesafe migrate --allow-other-tables` once to share this one")


class JobNotFound(FiresafeError, KeyError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no job with key {key!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Permanent(Exception):
    """Raise inside a job to fail it for good: no retry, straight to the dead letters."""


class UnstorableValue(InvalidInput, Permanent):
    """A job or a step returned a value that cannot be stored as JSON. Its work is done but not
    recorded, so it is not retried (a retry would do the work again): the job goes dead at once."""


#: The longest wait firesafe accepts anywhere (an enqueue's delay, RetryAfter, ctx.sleep, a
#: limiter's turn), in seconds: 1,000 years. Longer ones would name dates no datetime can hold.
MAX_DELAY = 1000 * 365 * 86400.0


def check_wait(seconds: object, what: str) -> float:
    """``seconds`` as a float if it is a real number from 0 to :data:`MAX_DELAY`, else InvalidInput.

    >>> check_wait(2, "RetryAfter")
    2.0
    >>> check_wait(float("nan"), "RetryAfter")
    Traceback (most recent call last):
    ...
    firesafe.errors.InvalidInput: RetryAfter needs a number of seconds from 0 to 31536000000 (1,000 years), not nan
    """
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_DELAY:
        raise InvalidInput(f"{what} needs a number of seconds from 0 to {MAX_DELAY:.0f} (1,000 years), "
                           f"not {seconds!r}")
    return float(seconds)


class RetryAfter(Exception):
    """Raise inside a job to try again no sooner than ``seconds`` from now.

    Waiting does not use up an attempt (up to the job's ``max_deferrals``).
    """

    def __init__(self, seconds: float, reason: str = "") -> None:
        self.seconds = check_wait(seconds, "RetryAfter")
        self.reason = reason
        super().__init__(reason or f"retry after {self.seconds:g}s")


class WaitingForChildren(RetryAfter):
    """Raised by ``ctx.wait_children``: the job gives its worker back and waits for its children;
    the store wakes it when the last of them ends (or after ``seconds``, the wait's deadline)."""


class Cancelled(Exception):
    """Raise inside a job (for instance when ``ctx.cancelled`` is true) to end it as cancelled."""
