"""What a signal is: a name, JSON data, and the rules for both; the errors of a wait and a send.

A job's wait for signal ``NAME`` is recorded as the step ``signal:NAME`` holding its deadline, so
the wait keeps its place among the job's steps and its deadline across every park and retry. The
signal itself is kept once per (job, name) in the store. Whether a wait got its signal is a pure
function of the two records (:func:`wait_outcome`), so every later run of the job sees the same answer.
"""

from __future__ import annotations

from typing import Any

from firesafe.errors import InvalidInput, Permanent
from firesafe.idempotency.keys import MAX_PAYLOAD_BYTES, canonical_json, check_name

#: How long ``ctx.wait_for_signal`` waits when given no timeout: 30 days.
DEFAULT_SIGNAL_TIMEOUT = 30 * 86400.0
#: The largest data one signal carries, in bytes of JSON (the cap of a job's arguments).
MAX_SIGNAL_DATA = MAX_PAYLOAD_BYTES
#: The step names of waits begin with this.
WAIT_PREFIX = "signal:"


class SignalTimeout(Permanent):
    """A job's wait for a signal reached its deadline with no signal (and no default was given).

    Permanent: the wait's deadline is recorded, so a retry would time out again at once. Send the
    signal, then ``firesafe rerun KEY --from-step signal:NAME`` to wait again (a signal already
    sent answers the new wait at once)."""


class SignalConflict(InvalidInput):
    """The signal was sent to that job already, with other data: a signal is delivered once, as first sent."""


def check_signal_name(name: object) -> str:
    """``name`` if it is a valid signal name (the pattern of job and queue names), else InvalidInput.

    >>> check_signal_name("approval")
    'approval'
    """
    return check_name(name, "signal name")


def wait_step_name(name: str) -> str:
    """The step that records a job's wait for signal ``name``.

    >>> wait_step_name("approval")
    'signal:approval'
    """
    return WAIT_PREFIX + name


def signal_data_json(data: Any) -> str:
    """A signal's data as its canonical JSON text (what the store keeps and the job gets back);
    InvalidInput, one line, for data JSON cannot carry (a lone surrogate, NaN, a set, more than
    :data:`MAX_SIGNAL_DATA` bytes, nested too deep).

    >>> signal_data_json({"note": "ok\\x00", "approved": True})
    '{"approved":true,"note":"ok\\\\u0000"}'
    """
    return canonical_json(data, "the signal's data", limit=MAX_SIGNAL_DATA)


def wait_outcome(until: float, sent_at: float | None, now: float) -> str:
    """What a wait with deadline ``until`` does now: ``"signal"`` (it got the signal sent at
    ``sent_at``), ``"timeout"`` or ``"wait"`` (park until a signal or the deadline). A signal
    sent after the deadline does not answer the wait, however late the job looks: the answer
    never changes once given.

    >>> wait_outcome(100.0, 99.0, 150.0), wait_outcome(100.0, 101.0, 150.0), wait_outcome(100.0, None, 50.0)
    ('signal', 'timeout', 'wait')
    """
    if sent_at is not None and sent_at <= until:
        return "signal"
    return "timeout" if now >= until else "wait"


__all__ = ["DEFAULT_SIGNAL_TIMEOUT", "MAX_SIGNAL_DATA", "WAIT_PREFIX", "SignalConflict", "SignalTimeout",
           "check_signal_name", "signal_data_json", "wait_outcome", "wait_step_name"]
