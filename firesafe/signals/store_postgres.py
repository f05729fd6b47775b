"""The signals part of the PostgreSQL store: a mixin (queries in sql/postgres/signals.sql). What is the
same on both dialects is written once in :class:`firesafe.signals.store.SignalsPart`."""

from __future__ import annotations

from typing import Any

from firesafe.signals.store import SignalsPart
from firesafe.store.driver import PostgresPart


class SignalsPostgres(SignalsPart, PostgresPart):
    """Store methods of the signals part that differ on PostgreSQL; mixed into the postgres store class."""

    def _wake_params(self, job_id: int, wake: bool, now: float | None) -> dict[str, Any]:
        # PostgreSQL's signal_wake also wakes the workers listening on the store's channel (NOTIFY).
        return {**super()._wake_params(job_id, wake, now), "channel": self.channel}
