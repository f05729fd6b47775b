"""firesafe: the recovery layer for background jobs and automations.

Idempotent jobs keyed by ID, bounded retries, dead letters with the trace of every attempt, and
safe replays, on SQLite or PostgreSQL.
"""

from firesafe.app import App, JobDef, Retention
from firesafe.clock import FakeClock
from firesafe.context import Context
from firesafe.errors import (
    Cancelled,
    ConfigError,
    FiresafeError,
    IdempotencyConflict,
    InvalidInput,
    JobNotFound,
    Permanent,
    RetryAfter,
    StoreError,
)
from firesafe.hooks import AttemptEnded, AttemptStarted, Hook, JobDead, JobsReplayed
from firesafe.masking import Mask
from firesafe.models import Attempt, Event, Job
from firesafe.retries.backoff import Backoff
from firesafe.signals import SignalConflict, SignalTimeout
from firesafe.states import Outcome, State
from firesafe.version import __version__

__all__ = [
    "App",
    "Attempt",
    "AttemptEnded",
    "AttemptStarted",
    "Backoff",
    "Cancelled",
    "ConfigError",
    "Context",
    "Event",
    "FakeClock",
    "FiresafeError",
    "Hook",
    "IdempotencyConflict",
    "InvalidInput",
    "Job",
    "JobDead",
    "JobDef",
    "JobNotFound",
    "JobsReplayed",
    "Mask",
    "Outcome",
    "Permanent",
    "Retention",
    "RetryAfter",
    "SignalConflict",
    "SignalTimeout",
    "State",
    "StoreError",
    "__version__",
]
