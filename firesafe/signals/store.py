"""The signals part of the store, written once for both dialects (its queries: store/sql/*/signals.sql);
``SignalsSQLite`` and ``SignalsPostgres`` add only what differs. The methods are declared in
:class:`firesafe.store.contract.SignalStore`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from firesafe.errors import InvalidInput, JobNotFound
from firesafe.signals.signals import SignalConflict, wait_step_name
from firesafe.states import FINISHED
from firesafe.store.driver import StorePart


@dataclass(frozen=True)
class SignalRecord:
    """A signal as the store keeps it: its data is canonical JSON text."""

    name: str
    data: str
    actor: str
    reason: str | None
    sent_at: float

    def value(self) -> Any:
        """The data, decoded."""
        return json.loads(self.data)


@dataclass(frozen=True)
class SignalSent:
    """What a send did: ``sent`` False when the same signal was kept already (delivered once);
    ``woke`` True when the job was parked waiting for it and is due now."""

    key: str
    name: str
    sent: bool
    woke: bool
    signal: SignalRecord


def _record(row: Any) -> SignalRecord:
    return SignalRecord(row["name"], row["data"], row["actor"], row["reason"], float(row["sent_at"]))


class SignalsPart(StorePart):
    """Store methods of the signals part that are the same on both dialects (written against the driver)."""

    def signal_send(self, key: str, name: str, data: str, actor: str, reason: str | None = None) -> SignalSent:
        now = self._now()
        with self._tx() as c:
            job = c.execute(self.q["signal_job"], {"key": key, "step": wait_step_name(name), "now": now}).fetchone()
            if job is None:
                raise JobNotFound(key)
            if job["state"] in FINISHED:
                raise InvalidInput(f"job {key!r} is {job['state']}: a signal goes to a job that has not finished "
                                   "(rerun it first if it should wait again)")
            params = {"job_id": job["id"], "name": name}
            row = c.execute(self.q["signal_insert"], {**params, "data": data, "actor": actor, "reason": reason,
                                                      "now": now}).fetchone()
            if row is None:  # sent already: the signal kept is the first one
                kept = _record(c.execute(self.q["signal_get"], params).fetchone())
                if kept.data != data:
                    raise SignalConflict(f"signal {name!r} was sent to job {key!r} already, by {kept.actor}, with "
                                         "other data; a signal is delivered once, as first sent")
                return SignalSent(key, name, False, False, kept)
            kept = _record(row)
            woke = bool(job["waiting"])
            c.execute(self.q["signal_wake"], self._wake_params(job["id"], woke, now))
            c.execute(self.q["event_insert"], {
                "job_id": job["id"], "now": now, "kind": "signal_sent", "actor": actor,
                "detail": json.dumps({"name": name, "woke": woke, **({"reason": reason} if reason else {})})})
        return SignalSent(key, name, True, woke, kept)

    def signal_get(self, job_id: int, name: str) -> SignalRecord | None:
        rows = self._read("signal_get", {"job_id": job_id, "name": name})
        return _record(rows[0]) if rows else None

    def signal_list(self, job_id: int) -> list[SignalRecord]:
        return [_record(r) for r in self._read("signal_list", {"job_id": job_id})]

    def _wake_params(self, job_id: int, wake: bool, now: float | None) -> dict[str, Any]:
        """The parameters of the ``signal_wake`` query."""
        return {"job_id": job_id, "wake": wake, "now": now}


__all__ = ["SignalRecord", "SignalSent", "SignalsPart"]
