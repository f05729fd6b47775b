"""What a running job sees as its first argument: ``ctx``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from firesafe.masking import mask

log = logging.getLogger("firesafe.job")


@dataclass(frozen=True)
class JobInfo:
    key: str
    name: str
    queue: str
    attempt: int  # within the retry budget, 1-based
    max_attempts: int
    run: int  # every claim counts, deferrals and rescues too
    id: int


class Context:
    """Passed to every job function as ``ctx``."""

    def __init__(self, job: JobInfo, store: Any = None, app: Any = None) -> None:
        self.job = job
        self._store = store
        self._app = app
        self._cancel = False  # set once by the worker loop; nothing waits on it, so a flag is enough

    @property
    def cancelled(self) -> bool:
        """True once someone asked this job to stop (cancel, shutdown, timeout or a lost lease)."""
        return self._cancel

    def _request_cancel(self) -> None:
        self._cancel = True

    def log(self, message: str, **fields: Any) -> None:
        """Log a line tagged with this job's key and attempt (fields with secret names are masked)."""
        extra = {"job_key": self.job.key, "job_name": self.job.name, "attempt": self.job.attempt}
        extra.update({f"f_{k}": v for k, v in mask(fields).items()})
        suffix = " ".join(f"{k}={v}" for k, v in mask(fields).items())
        log.info("%s [%s #%d] %s", message, self.job.key, self.job.attempt, suffix, extra=extra)
