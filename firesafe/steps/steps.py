"""Durable steps: each completed step is recorded under ``(job, step name)`` and never runs again.

A step's result is written before the job moves on, fenced on the attempt's lease, so a retry, a
rescue after a crash or a replay restores it instead of running it. One window stays open that no
recorder can close: the process dies after the step's effect happened and before its record was
committed. The step then runs again on the next attempt, which is why :func:`step_key` exists: pass
it to the provider (an ``Idempotency-Key`` header) and the provider closes that window.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from firesafe.clock import to_datetime
from firesafe.errors import InvalidInput, Permanent, RetryAfter, UnstorableValue
from firesafe.idempotency.keys import canonical_json
from firesafe.idempotency.keys import step_key as step_key  # re-exported: ctx.idempotency_key uses it
from firesafe.signals.signals import SignalTimeout, wait_outcome, wait_step_name
from firesafe.steps.versions import (
    MARKER_PREFIX,
    Divergence,
    decide_patch,
    divergence,
    is_marker,
    marker_name,
    removed_markers,
)

if TYPE_CHECKING:
    from firesafe.store.base import StepRecord
    from firesafe.store.contract import Store

MAX_STEP_RESULT = 1024 * 1024
MAX_STEP_NAME = 200
#: The longest change id of ``ctx.patched``: its marker is recorded as a step named ``patch:ID``.
MAX_CHANGE_ID = MAX_STEP_NAME - len(MARKER_PREFIX)
#: The mark :func:`repeatable` puts on a step's function.
REPEATABLE = "__firesafe_repeatable__"

F = TypeVar("F", bound=Callable[..., Any])


def repeatable(fn: F) -> F:
    """Declare a step's function safe to run more than once: a read, an upsert, a call its provider
    deduplicates by itself. ``ctx.step("fetch", repeatable(fetch_rates), day)``, or ``@repeatable``
    on the function. The step is recorded and restored like any other (a recorded step never runs
    again); the mark tells ``firesafe drill`` that a call repeated after a crash is not a double
    effect, so the drill does not count it as a broken promise. Returns a marked wrapper; ``fn``
    itself is left as it is (it may be used unmarked in another step).

    >>> is_repeatable(repeatable(len)), is_repeatable(len)
    (True, False)
    """
    if not callable(fn):
        raise InvalidInput(f"repeatable() takes a step's function, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def acall(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

        marked: Any = acall
    else:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        marked = call
    setattr(marked, REPEATABLE, True)
    return marked


def is_repeatable(fn: object) -> bool:
    """Whether ``fn`` was declared safe to repeat with :func:`repeatable`."""
    return getattr(fn, REPEATABLE, False) is True


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


class SignalWait(DurableSleep):
    """Raised by ``ctx.wait_for_signal`` while the signal has not come: the job is parked until the
    wait's deadline, and made due at once when the signal is sent (no worker held)."""


#: ``ctx.wait_for_signal``'s ``default`` when none is given: the wait raises SignalTimeout instead.
NO_DEFAULT: Any = object()


def _run_alone(awaitable: Any) -> Any:
    """An async step's result outside a worker's pool thread: on an event loop of its own."""
    return asyncio.run(asyncio.wait_for(awaitable, None))


class Steps:
    """The step record of one attempt (``ctx.step`` and ``ctx.sleep`` use it)."""

    def __init__(self, store: Store, job_id: int, token: str,
                 run_coroutine: Callable[[Any], Any] | None = None, on_divergence: str = "dead") -> None:
        self._store = store
        #: runs an async step's coroutine to its result (the worker's: on the pool thread's own loop)
        self._run_coroutine = run_coroutine or _run_alone
        self._job_id = job_id
        self._token = token
        self._recorded: dict[int, StepRecord] | None = None  # by the position each was recorded at
        self._names: dict[int, str] = {}  # the recorded name at each recorded position
        self._where: dict[str, int] = {}  # the recorded position of each recorded name
        self._on_divergence = on_divergence
        self._patches: dict[str, bool] = {}  # the answer of each version marker met in this run
        self._seen: list[str] = []
        self.log: list[dict[str, Any]] = []

    def _begin(self, name: object, marker: bool = False) -> tuple[str, int, StepRecord | None]:
        if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME or not name.isprintable():
            raise InvalidInput(f"a step name must be 1 to {MAX_STEP_NAME} printable characters, not {_shown(name)}")
        if not marker and is_marker(name):
            raise InvalidInput(f"step names starting with {MARKER_PREFIX!r} are reserved for ctx.patched, "
                               f"not {name!r}")
        if name in self._seen:
            raise DuplicateStep(f"step {name!r} was already used in this run; step names must be unique")
        names = self._load()
        for passed in removed_markers(names, len(self._seen), name):
            self._seen.append(passed)  # the code no longer asks: the run took the only path left
            self.log.append({"name": passed, "status": "restored"})
        position = len(self._seen)
        self._seen.append(name)
        # A step that failed left no record, so recorded positions may have gaps: compare by position.
        rec = self._recorded.get(position) if self._recorded else None
        if rec is not None and rec.name == name:
            return name, position, rec
        if rec is None and name not in self._where:  # a step the recorded run does not have: no question
            return name, position, None
        differs = divergence(names, position, name)
        if differs is None:
            return name, position, None
        if self._on_divergence == "rerun":
            self._rerun_from(differs)
            return name, position, None
        recorded = [n for _, n in sorted(names.items())]
        raise NonDeterminism(
            f"{differs.describe()}; recorded: {recorded}, this run: {self._seen}. The job's code changed its "
            "steps: rerun it --from-step or --from-scratch (or guard the change with ctx.patched, or declare "
            "the job with on_divergence='rerun')"
        )

    def _load(self) -> dict[int, str]:
        """The recorded run (read once per attempt): the name recorded at each position."""
        if self._recorded is None:
            self._set_recorded({r.position: r for r in self._store.step_list(self._job_id)})
        return self._names

    def _set_recorded(self, records: dict[int, StepRecord]) -> None:
        """The recorded run, and its names by position and positions by name."""
        self._recorded = records
        self._names = {p: r.name for p, r in records.items()}
        self._where = {r.name: p for p, r in records.items()}

    def _rerun_from(self, differs: Divergence) -> None:
        """Forget the recorded steps from the first difference on (fenced, with an event in the job's
        trace), so the new code runs from there; the steps before it stay restored."""
        detail = {"message": differs.describe(), "step": differs.step, "position": differs.position + 1,
                  "recorded": differs.recorded_there, "from_position": differs.forget_from + 1,
                  "forgotten": list(differs.forgotten)}
        if self._store.step_forget_from(self._job_id, self._token, differs.forget_from, detail) is None:
            raise LeaseLost(f"step {differs.step!r} differs from the recorded run, and this attempt lost its "
                            "lease before the recorded steps could be forgotten")
        self._set_recorded({p: r for p, r in (self._recorded or {}).items() if p < differs.forget_from})

    def patched(self, change_id: object) -> bool:
        """Whether this run takes the new path of the change ``change_id`` (see ``Context.patched``)."""
        if not isinstance(change_id, str) or not change_id or len(change_id) > MAX_CHANGE_ID \
                or not change_id.isprintable():
            raise InvalidInput(f"a change id must be 1 to {MAX_CHANGE_ID} printable characters, "
                               f"not {_shown(change_id)}")
        known = self._patches.get(change_id)
        if known is not None:  # asked again in this run: the same answer, no second place
            return known
        marker = marker_name(change_id)
        names = self._load()
        if marker in self._seen:  # passed over as a removed marker: the run recorded it
            answer = True
        else:
            position = len(self._seen) + len(removed_markers(names, len(self._seen), marker))
            answer = decide_patch(names, position, marker) != "old"
            if answer:
                name, position, rec = self._begin(marker, marker=True)
                if rec is None:
                    self._record(name, position, True)
                else:
                    self._restored(name, rec)
            else:
                self.log.append({"name": marker, "status": "old-path"})
        self._patches[change_id] = answer
        return answer

    def _record(self, name: str, position: int, value: Any) -> Any:
        try:
            text = canonical_json(value, what=f"the result of step {name!r}", limit=MAX_STEP_RESULT)
        except (ValueError, TypeError, RecursionError):  # InvalidInput is a ValueError
            # The effect has happened: a retry would repeat it, so the error is permanent.
            error = UnstorableValue(f"step {name!r} returned a value {_why_unstorable(value)}; its effect "
                                    "ran but is not recorded, so the job is not retried")
            self._failed(name, error)
            raise error from None
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
                value = self._run_coroutine(value)
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


    def wait_for_signal(self, name: str, timeout: float, default: Any = NO_DEFAULT) -> Any:
        """The data of signal ``name`` sent to this job; parks the job (``SignalWait``) until it is
        sent or ``timeout`` seconds after the wait began, then returns ``default`` or raises
        ``SignalTimeout``. The wait is the step ``signal:NAME`` holding its deadline, so every later
        run of the job gets the same answer: the signal if it was sent by the deadline, else none."""
        label, position, rec = self._begin(wait_step_name(name))
        now = self._store.now()
        if rec is None:  # the wait begins: its deadline is recorded before the signal is looked for
            until = now + timeout
            self._record(label, position, {"signal": name, "until": until})
            self.log.pop()  # the log says how the wait ended, below
        else:
            until = _deadline(label, rec)
        signal = self._store.signal_get(self._job_id, name)
        outcome = wait_outcome(until, signal.sent_at if signal is not None else None, now)
        if outcome == "signal" and signal is not None:
            self.log.append({"name": label, "status": "signal", "by": signal.actor})
            return signal.value()
        when = to_datetime(until).isoformat()
        if outcome == "timeout":
            self.log.append({"name": label, "status": "timed_out"})
            if default is not NO_DEFAULT:
                return default
            raise SignalTimeout(f"no signal {name!r} came within the wait's timeout (until {when}); "
                                f"send it, then rerun the job --from-step {label}")
        self.log.append({"name": label, "status": "waiting"})
        raise SignalWait(until - now, reason=f"waiting for signal {name!r} until {when}")


def _deadline(label: str, rec: StepRecord) -> float:
    """The deadline a wait recorded; NonDeterminism if ``ctx.step`` recorded that name instead."""
    try:
        until = json.loads(rec.result or "null").get("until")
    except (ValueError, AttributeError):
        until = None
    if isinstance(until, bool) or not isinstance(until, (int, float)):
        raise NonDeterminism(f"step {label!r} was recorded by ctx.step, not by a wait for a signal; "
                             "rerun it --from-step or --from-scratch")
    return float(until)


def _shown(value: object) -> str:
    """A name given where a step's or a change's name goes, for an error message: its ``repr`` cut
    short (a name may be huge), or its type for what is not a string.

    >>> _shown("x" * 100)[-8:], _shown(3)
    ('xxxxx...', 'an int')
    """
    if not isinstance(value, str):
        kind = type(value).__name__
        return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _why_unstorable(value: Any) -> str:
    """Why ``value`` cannot be a step's record, e.g. ``that cannot be stored as JSON (set at [0]['ids'])``."""
    try:
        text = canonical_json(value, "it", limit=None)
    except (ValueError, TypeError, RecursionError) as exc:
        try:
            part = _not_json(value, "")
        except RecursionError:
            part = "a value nested too deeply or holding itself"
        return f"that cannot be stored as JSON ({part or str(exc).removeprefix('it are ')})"
    return f"too large to store ({len(text.encode())} bytes of JSON; the cap is {MAX_STEP_RESULT} bytes)"


def _not_json(value: Any, path: str) -> str | None:
    """The first part of ``value`` that JSON cannot carry, and where (None: none found).

    >>> _not_json({"ok": [1, {"ids": {1, 2}}]}, "")
    "set at ['ok'][1]['ids']"
    >>> _not_json(float("inf"), "")
    'float inf'
    """
    at = f" at {path}" if path else ""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return f"str with a lone surrogate{at}"
        return None
    if isinstance(value, int):
        try:
            int.__repr__(value)
        except ValueError:
            return f"int of more than {sys.get_int_max_str_digits()} digits{at}"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"float {value!r}{at}"
    if isinstance(value, (list, tuple)):
        return next((p for i, v in enumerate(value) if (p := _not_json(v, f"{path}[{i}]"))), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"dict with a key of type {type(k).__name__}{at}"
            if p := _not_json(v, f"{path}[{k!r}]"):
                return p
        return None
    return f"{type(value).__name__}{at}"
