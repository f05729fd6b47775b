"""Run one attempt, then decide (pure) what it leads to; the worker saves the decision.

``execute`` is the only place user code runs. ``conclude`` turns what happened into the store's
:class:`FinishParams` without any I/O.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import traceback as tb_mod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from firesafe.errors import Cancelled, InvalidInput, RetryAfter, UnstorableValue
from firesafe.idempotency.keys import canonical_json
from firesafe.limits.http import retry_after_of
from firesafe.masking import mask_text, mask_values, secret_values
from firesafe.retries.decide import Budget, decide
from firesafe.sanitize import for_store, safe_str
from firesafe.states import Outcome, State
from firesafe.store.base import Claimed, FinishParams
from firesafe.worker.pool import run_coroutine

if TYPE_CHECKING:
    from firesafe.context import Context
    from firesafe.jobs import JobDef
    from firesafe.limits.gate import Gate

log = logging.getLogger("firesafe.worker")

#: Bounds of what the trace keeps of an error (characters).
MAX_TYPE = 200
MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000
MAX_RESULT_BYTES = 1024 * 1024


@dataclass(slots=True)  # read-only by convention: built once an attempt, and frozen would cost 6x
class AttemptResult:
    error: BaseException | None
    value: Any = None
    timed_out: bool = False
    duration: float = 0.0
    traceback: str | None = None
    result_json: str | None = None  # the canonical JSON of ``value``, made once when the attempt ends
    retry_after: float | None = None  # seconds an HTTP 429/503 error's Retry-After asks for (firesafe/limits)
    paused_until: float | None = None  # the limiter pause that Retry-After stored at once (the store's clock)


class TimedOut(Exception):
    """The attempt ran past its job's ``timeout``."""


class ProcessDeath(BaseException):
    """Stands for the death of the process running an attempt (the deterministic simulation raises
    it where a real process would simply vanish): never the attempt's failure, it passes through."""


async def _bounded(coro: Any, timeout: float | None) -> tuple[Any, bool]:
    try:
        async with asyncio.timeout(timeout) as scope:
            return await coro, False
    except TimeoutError:
        if scope.expired():
            return None, True
        raise


def execute(jobdef: JobDef, ctx: Context, args: list[Any], kwargs: dict[str, Any], *,
            gate: Gate | None = None) -> AttemptResult:
    """Run the job function once; never raises: whatever it raises, even SystemExit, KeyboardInterrupt
    or asyncio.CancelledError, is that attempt's failure (a worker thread must never die of a job).

    Under limiters, the job's code runs only if its grant still holds when it starts (else the
    attempt ends unrun, given back), and a Retry-After it meets pauses the limiters at once."""
    start = time.monotonic()
    if gate is not None:
        refused = gate.before_start(ctx, jobdef.timeout)
        if refused is not None:
            return AttemptResult(refused, duration=time.monotonic() - start)
    try:
        if jobdef.is_async:
            value, timed_out = run_coroutine(_bounded(jobdef.fn(ctx, *args, **kwargs), jobdef.timeout), None)
            if timed_out:
                err = TimedOut(f"the attempt ran longer than its timeout of {jobdef.timeout:g}s")
                return AttemptResult(err, timed_out=True, duration=time.monotonic() - start)
        else:
            value = jobdef.fn(ctx, *args, **kwargs)
            if value is not None and inspect.isawaitable(value):
                value, _ = run_coroutine(_bounded(value, jobdef.timeout), None)
        try:
            result_json = "null" if value is None else canonical_json(value, what="the job's result",
                                                                      limit=MAX_RESULT_BYTES)
        except InvalidInput as exc:  # the work is done: a retry would do it again (no retry, see UnstorableValue)
            why = str(exc).removeprefix("argument ")
            raise UnstorableValue(f"job {jobdef.name!r} returned a value that cannot be stored as JSON: {why}; "
                                  "its work is done but not recorded, so it is not retried") from None
        return AttemptResult(None, value, duration=time.monotonic() - start, result_json=result_json)
    except ProcessDeath:
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt, CancelledError a job raises: its failure too
        res = _failed(exc, start)
        if gate is not None:
            try:
                res.paused_until = gate.after_failure(ctx, res.error, res.retry_after)
            except Exception:  # firesafe's own bug: the outcome's report pauses the limiter instead
                log.exception("could not tell the limiters of %s about its failure", ctx.job.key)
        return res


def _failed(exc: BaseException, start: float) -> AttemptResult:
    """The attempt that raised ``exc``, whatever ``exc`` holds or does when looked at (never raises)."""
    try:
        retry_after = retry_after_of(exc, time.time()) if isinstance(exc, Exception) else None
    except Exception:  # an error of an odd shape: nothing to honour
        retry_after = None
    return AttemptResult(exc, duration=time.monotonic() - start, traceback=_format_tb(exc), retry_after=retry_after)


def _format_tb(exc: BaseException) -> str:
    """The traceback of ``exc`` with its chain and notes, masked, its last ``MAX_TRACEBACK``
    characters. Never raises: what cannot be formatted (a ``__notes__`` that raises, say) is said."""
    try:
        text = "".join(tb_mod.format_exception(exc))
    except BaseException as failed:  # the formatting runs the error's own code (__str__, __notes__)
        try:
            frames = "".join(tb_mod.format_tb(exc.__traceback__))
        except BaseException:
            frames = ""
        type_name, message = error_fields(exc)
        text = (f"Traceback (most recent call last):\n{frames}{type_name}: {message}\n"
                f"(the rest of this error could not be formatted: {type(failed).__name__})\n")
    if len(text) > MAX_TRACEBACK:
        text = "...(cut)...\n" + text[-MAX_TRACEBACK:]
    try:
        return mask_text(text)
    except Exception as failed:  # unmasked, it could show a secret: not kept
        return f"(this traceback could not be masked ({type(failed).__name__}), so it is not kept)\n"


def error_fields(exc: BaseException | None) -> tuple[str | None, str | None]:
    """The type name and message of ``exc`` as a trace keeps them: bounded and masked (not yet
    escaped for the store: :func:`conclude` does that last). Never raises, whatever ``__str__`` does."""
    if exc is None:
        return None, None
    return type(exc).__name__[:MAX_TYPE], mask_text(safe_str(exc)[:MAX_MESSAGE])


def conclude(claimed: Claimed, jobdef: JobDef, res: AttemptResult, draw: float, *,
             cancel_requested: bool = False, detail: dict[str, Any] | None = None) -> FinishParams:
    """What to save for an attempt that ended as ``res`` (pure). Never raises: an attempt whose
    error defeats the recording of it is recorded as failed with a message saying so."""
    fin = _conclude(claimed, jobdef, res, draw, cancel_requested, detail)
    if claimed.job.parent_id is not None:  # a child: its end is counted off its parent's children
        fin.parent_id = claimed.job.parent_id
    return fin


def _conclude(claimed: Claimed, jobdef: JobDef, res: AttemptResult, draw: float, cancel_requested: bool,
              detail: dict[str, Any] | None) -> FinishParams:
    job = claimed.job
    if res.error is None and not res.timed_out:  # it returned: succeeded (decide's answer, without asking)
        result = res.result_json
        if result is None:
            result = json.dumps(res.value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return FinishParams(job.id, claimed.token, job.runs, State.SUCCEEDED, Outcome.SUCCEEDED, None, 0, result,
                            None, None, None, None, _detail_json(detail, res.duration))
    budget = Budget(job.attempt, job.max_attempts, job.deferrals, jobdef.max_deferrals)
    try:
        return _conclude_failure(claimed, jobdef, res, draw, budget, cancel_requested, detail)
    except Exception as exc:  # firesafe's own code met something it did not foresee in the error
        decision = decide(RuntimeError(), budget, jobdef.backoff, draw)
        kind = "TimedOut" if res.timed_out else for_store(type(res.error).__name__[:MAX_TYPE])
        return FinishParams(
            job_id=job.id, token=claimed.token, seq=job.runs, state=decision.state, outcome=decision.outcome,
            delay=decision.delay, error_type=kind,
            message=f"the error this attempt raised could not be recorded ({type(exc).__name__} while reading it)",
            reason=decision.reason, detail=_detail_json(None, res.duration))


def _conclude_failure(claimed: Claimed, jobdef: JobDef, res: AttemptResult, draw: float, budget: Budget,
                      cancel_requested: bool, detail: dict[str, Any] | None) -> FinishParams:
    job = claimed.job
    if cancel_requested and res.error is not None and not res.timed_out:
        decision = decide(Cancelled("cancel requested"), budget, jobdef.backoff, draw)
    else:
        # An HTTP 429/503 error carrying Retry-After is taken as RetryAfter; the trace keeps the error.
        error = RetryAfter(res.retry_after) if res.retry_after is not None and not isinstance(
            res.error, RetryAfter) else res.error
        decision = decide(error, budget, jobdef.backoff, draw, timed_out=res.timed_out,
                          give_up_on=jobdef.give_up_on)
    error_type, message = error_fields(res.error)
    if res.timed_out:
        error_type = "TimedOut"
    traceback = res.traceback
    if res.error is not None and (secrets := secret_values(job.args, job.kwargs, job.arg_names)):
        # An error that quotes a secret argument (``f"refused {api_key}"``) keeps it out of the trace,
        # the alerts and the logs, which all read what is saved here.
        message = mask_values(message, secrets) if message else message
        traceback = mask_values(traceback, secrets) if traceback else traceback
        detail = _masked_strings(detail, secrets) if detail else detail
    # Escaped for the store last, once masked: what is stored is valid UTF-8 without NUL, whatever
    # the error held (invariant 11); a secret is masked before any of its characters is escaped.
    return FinishParams(
        job_id=job.id, token=claimed.token, seq=job.runs, state=decision.state, outcome=decision.outcome,
        delay=decision.delay, given_back=1 if decision.deferred else 0, result=None,
        error_type=error_type and for_store(error_type), message=message and for_store(message),
        traceback=traceback and for_store(traceback), reason=decision.reason,
        detail=_detail_json(detail, res.duration),
    )


def _detail_json(detail: dict[str, Any] | None, duration: float) -> str:
    """The trace entry's detail: what the attempt noted (its steps) and how long it took."""
    if detail:
        return json.dumps({**detail, "duration": round(duration, 6)})
    return f'{{"duration": {round(duration, 6)!r}}}'  # the usual case: the very text json.dumps makes


def _masked_strings(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        return mask_values(value, secrets)
    if isinstance(value, dict):
        return {k: _masked_strings(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked_strings(v, secrets) for v in value]
    return value


def unknown_job(claimed: Claimed) -> FinishParams:
    """A job whose name no code in this worker registers: dead, and nothing is imported for it."""
    job = claimed.job
    msg = f"no job named {job.name!r} is registered in this worker's app"
    return FinishParams(job_id=job.id, token=claimed.token, seq=job.runs, state=State.DEAD,
                        outcome=Outcome.FAILED, error_type="UnknownJob", message=msg, reason="unknown_job",
                        parent_id=job.parent_id)


def undecodable(claimed: Claimed) -> FinishParams:
    """A job whose stored arguments cannot be read (written by hand or by an older version): dead,
    its function never called, the trace saying why."""
    job = claimed.job
    msg = for_store(f"the job's stored arguments cannot be read, so it cannot run: {job.unreadable}")
    return FinishParams(job_id=job.id, token=claimed.token, seq=job.runs, state=State.DEAD,
                        outcome=Outcome.FAILED, error_type="UndecodablePayload", message=msg,
                        reason="undecodable_payload", parent_id=job.parent_id)


def escaped_ascii(fin: FinishParams) -> FinishParams:
    """``fin`` with all its text in plain ASCII, the rest written as escapes (JSON text re-encoded
    with ``\\u`` escapes): for an outcome a store refused for its data (a database whose encoding
    lacks some character, say)."""
    return replace(fin, error_type=_ascii(fin.error_type), message=_ascii(fin.message),
                   traceback=_ascii(fin.traceback), reason=_ascii(fin.reason),
                   result=_ascii_json(fin.result), detail=_ascii_json(fin.detail))


def unstorable(fin: FinishParams, why: BaseException) -> FinishParams:
    """The outcome to save in place of ``fin`` when the store refuses even its ASCII form: dead,
    without its result, error text or detail, and a message saying so."""
    cause = type(why.__cause__ or why).__name__
    return replace(fin, state=State.DEAD, outcome=Outcome.FAILED, delay=None, given_back=0, result=None,
                   error_type="UnstorableOutcome", traceback=None, reason="unstorable_outcome", detail=None,
                   message=f"the store refused to record this attempt's outcome ({cause}); what the attempt "
                           "returned or raised is not kept")


def _ascii(text: str | None) -> str | None:
    """``text`` as printable ASCII plus tab, newline and carriage return.

    >>> _ascii("caf\\udce9 \\x00 é")
    'caf\\\\udce9 \\\\x00 \\\\xe9'
    """
    if text is None:
        return None
    return for_store(safe_str(text)).encode("ascii", "backslashreplace").decode("ascii")


def _ascii_json(text: str | None) -> str | None:
    """JSON text with ``\\u`` escapes for everything beyond ASCII; None if it does not decode."""
    if text is None or text.isascii():
        return text
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return None

