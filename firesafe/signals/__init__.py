"""Durable signals: a job waits, without a worker, for a named signal sent to it by key."""

from firesafe.signals.signals import (
    DEFAULT_SIGNAL_TIMEOUT,
    MAX_SIGNAL_DATA,
    SignalConflict,
    SignalTimeout,
    check_signal_name,
    signal_data_json,
    wait_step_name,
)
from firesafe.signals.store import SignalRecord, SignalSent

__all__ = ["DEFAULT_SIGNAL_TIMEOUT", "MAX_SIGNAL_DATA", "SignalConflict", "SignalRecord", "SignalSent",
           "SignalTimeout", "check_signal_name", "signal_data_json", "wait_step_name"]
