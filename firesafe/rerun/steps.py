"""Durable steps: each completed step is recorded under ``(job, step name)`` and never runs again.

A step's result is written before the job moves on, fenced on the attempt's lease, so a retry, a
rescue after a crash or a replay restores it instead of running it. One window stays open that no
recorder can close: the process dies after the step's effect happened and before its record was
committed. The step then runs again on the next attempt, which is why :func:`step_key` exists: pass
it to the provider (an ``Idempotency-Key`` header) and the provider closes that window.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from firesafe.errors import InvalidInput, Permanent, RetryAfter
from firesafe.idempotency.keys import MAX_KEY_LENGTH, canonical_json

if TYPE_CHECKING:
    from firesafe.store.base import StepRecord, Store

MAX_STEP_RESULT = 1024 * 1024
MAX_STEP_NAME = 200


class StepError(Permanent):
    """A step was used in a way that cannot be made safe; retrying would not help."""


class DuplicateStep(StepError):
    pass


class NonDeterminism(StepError):
    """The job met its steps in another order than a previous attempt recorded (the code changed)."""


class LeaseLost(Exception):
    """The attempt no longer holds the job's lease (it was rescued elsewhere); it must stop."""


class DurableSleep(RetryAfter):
    """Raised by ``ctx.sleep``: the job is put back and resumes after the wait (no worker held)."""


def step_key(job_key: str, step: str) -> str:
    """A key for the provider, the same on every attempt of this job and step, at most 255 chars.

    >>> step_key("refund:o-1", "charge")
    'refund:o-1/charge'
    >>> len(step_key("k" * 250, "charge"))
    255
    """
    key = f"{job_key}/{step}"
    if len(key) <= MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[:MAX_KEY_LENGTH - 65]}#{digest}"


class Steps:
    """The step record of one attempt (``ctx.step`` and ``ctx.sleep`` use it)."""

    def __init__(self, store: Store, job_id: int, token: str) -> None:
        self._store = store
        self._job_id = job_id
        self._token = token
        self._recorded: list[StepRecord] | None = None
        self._seen: list[str] = []
        self.log: list[dict[str, Any]] = []

    def _begin(self, name: object) -> tuple[str, int, StepRecord | None]:
        if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME or not name.isprintable():
            raise InvalidInput(f"a step name must be 1 to {MAX_STEP_NAME} printable characters, not {name!r}")
        if name in self._seen:
            raise DuplicateStep(f"step {name!r} was already used in this run; step names must be unique")
        if self._recorded is None:
            self._recorded = self._store.step_list(self._job_id)
        position = len(self._seen)
        self._seen.append(name)
        rec = self._recorded[position] if position < len(self._recorded) else None
        if rec is not None and rec.name != name:
            recorded = [r.name for r in self._recorded]
            raise NonDeterminism(
                f"step {position + 1} is {name!r} in this run but {rec.name!r} in the recorded run; "
                f"recorded: {recorded}, this run: {self._seen}. The job's code changed its steps: "
                "rerun it --from-step or --from-scratch"
            )
        return name, position, rec

    def _record(self, name: str, position: int, value: Any) -> Any:
        text = canonical_json(value, what=f"the result of step {name!r}", limit=MAX_STEP_RESULT)
        if not self._store.step_record(self._job_id, self._token, name, position, text):
            raise LeaseLost(f"step {name!r} finished after this attempt lost its lease; its record was dropped")
        self.log.append({"name": name, "status": "ran"})
        return json.loads(text)

    def _restored(self, name: str, rec: StepRecord) -> Any:
        self.log.append({"name": name, "status": "restored"})
        return json.loads(rec.result) if rec.result is not None else None

    def _failed(self, name: str, exc: BaseException) -> None:
        self.log.append({"name": name, "status": "failed", "error": type(exc).__name__})

    def run(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name, position, rec = self._begin(name)
        if rec is not None:
            return self._restored(name, rec)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                from firesafe.worker.pool import run_coroutine  # the worker package imports this one

                value = run_coroutine(value, None)
        except Exception as exc:
            self._failed(name, exc)
            raise
        return self._record(name, position, value)

    async def arun(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name, position, rec = self._begin(name)
        if rec is not None:
            return self._restored(name, rec)
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            self._failed(name, exc)
            raise
        return self._record(name, position, value)

    def sleep_until(self, name: str, until: float) -> None:
        name, position, rec = self._begin(name)
        now = self._store.now()
        if rec is None:
            self._record(name, position, {"until": until})
            self.log[-1]["status"] = "sleep"
        else:
            until = json.loads(rec.result or "{}").get("until", now)
            self.log.append({"name": name, "status": "restored"})
        if until > now:
            raise DurableSleep(until - now, reason=f"durable sleep {name!r} until {until:.3f}")
