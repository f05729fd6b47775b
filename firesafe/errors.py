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


class JobNotFound(FiresafeError, KeyError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no job with key {key!r}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Permanent(Exception):
    """Raise inside a job to fail it for good: no retry, straight to the dead letters."""


class RetryAfter(Exception):
    """Raise inside a job to try again no sooner than ``seconds`` from now.

    Waiting does not use up an attempt (up to the job's ``max_deferrals``).
    """

    def __init__(self, seconds: float, reason: str = "") -> None:
        if seconds < 0:
            raise InvalidInput("RetryAfter needs seconds >= 0")
        self.seconds = float(seconds)
        self.reason = reason
        super().__init__(reason or f"retry after {self.seconds:g}s")


class Cancelled(Exception):
    """Raise inside a job (for instance when ``ctx.cancelled`` is true) to end it as cancelled."""
