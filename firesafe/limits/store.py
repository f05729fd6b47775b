"""The limiter methods every store has, and their one implementation over two small dialect adapters.

A limiter's state is one row (``firesafe_limiters``): the bucket, the waiting line, the pause and
the breaker. Every method below locks the rows it needs, decides with the pure functions of
:mod:`firesafe.limits.bucket` and writes back in the same transaction, so the limits hold across
every worker process and host sharing the store.

Concurrency slots are rows ``(limiter, job_id, lease token)`` that count only while their job still
runs under that token with an unexpired lease: a finish (which clears the token) frees the slot in
its own transaction, and a dead worker's slots free themselves when its leases expire.

Jobs that may not start wait *without using an attempt and without counting as deferrals*: the
store moves them back to ``scheduled`` at their turn with ``reason = 'limiter:<name>'``, gives the
attempt back and closes the trace entry as ``deferred``. (``max_deferrals`` bounds a job that
defers itself with ``RetryAfter``; waiting for a limiter is not the job's doing, so it never counts
there and never dead-letters a job.)

Events (``firesafe_limiter_events``, read with :meth:`LimitsStore.limiter_event_list`): ``paused``,
``resumed``, ``breaker_opened`` and ``breaker_closed``, each with the limiter, time, actor and a
JSON detail. Breaker events are also recorded on the job whose attempt caused them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from firesafe.clock import to_datetime
from firesafe.errors import InvalidInput
from firesafe.limits import bucket
from firesafe.limits.bucket import LimiterSpec, LimiterState
from firesafe.store.base import FinishParams
from firesafe.store.driver import StorePart

#: The ``reason`` of a job waiting for a limiter: ``limiter:<name>``.
REASON_PREFIX = "limiter:"


@dataclass(frozen=True)
class Acquire:
    """Ask to start one claimed job under its limiters."""

    job_id: int
    token: str
    seq: int
    limiters: tuple[str, ...]
    draw: float = 0.0  # in [0, 1): spreads the job inside its turn if it must wait
    defer: bool = True  # if refused, give the attempt back and schedule the job at its turn
    key: str | None = None
    # The job holds a grant already but starts late: check the pause and the breaker again and take
    # a fresh token; its concurrency slots are kept (none taken, none counted against it).
    renew: bool = False


@dataclass(frozen=True)
class Grant:
    job_id: int
    granted: bool
    delay: float = 0.0  # refused: seconds until its turn
    limiter: str | None = None  # refused: the limiter with the longest wait
    why: str | None = None  # refused: paused, open, probing, concurrency or rate
    probe: bool = False  # granted as the probe of an open breaker
    quiet: bool = False  # granted, and every limiter was closed with no failures counted
    applied: bool = True  # refused with defer: False if the job no longer held its lease
    at: float = 0.0  # the store's time of the decision (the token's time)


@dataclass(frozen=True)
class Report:
    """How an attempt under some limiters ended."""

    job_id: int
    token: str
    seq: int
    limiters: tuple[str, ...]
    outcome: str  # ok, failure or neutral (see bucket.report)
    pause_for: float | None = None  # the provider's Retry-After, seconds
    pause_until: float | None = None  # the pause it already stored (limiter_retry_after): used instead of pause_for
    wait_for: float | None = None  # wait at least this long anyway (a limit refused inside the job)
    draw: float = 0.0
    finish: FinishParams | None = None  # the concluded attempt: turned into a wait if a verdict says so
    release: bool = False  # free this job's concurrency slots of these limiters (ctx.limit's exit)
    key: str | None = None


@dataclass(frozen=True)
class Verdict:
    job_id: int
    waits: bool  # the attempt is given back and the job waits (written if the report had a finish)
    delay: float = 0.0
    limiter: str | None = None
    applied: bool = True  # waits with a finish: False if the job no longer held its lease


@dataclass(frozen=True)
class LimiterStatus:
    """A limiter as ``firesafe limiters`` shows it."""

    name: str
    rate: float | None
    burst: float
    concurrency: int | None
    breaker_after: int | None
    cooldown: float
    tokens: float | None
    in_flight: int
    waiting: int
    paused_until: datetime | None
    pause_reason: str | None
    breaker: str
    failures: int
    retry_at: datetime | None
    updated_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in ("paused_until", "retry_at", "updated_at"):
            d[k] = d[k].isoformat() if d[k] else None
        return d


@dataclass(frozen=True)
class LimiterEvent:
    id: int
    limiter: str
    at: datetime
    kind: str  # paused, resumed, breaker_opened, breaker_closed
    actor: str | None
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "limiter": self.limiter, "at": self.at.isoformat(), "kind": self.kind,
                "actor": self.actor, "detail": self.detail}


def spec_of(row: Mapping[str, Any]) -> LimiterSpec:
    return LimiterSpec(row["name"], row["rate"], row["burst"], row["concurrency"], row["breaker_after"],
                       row["cooldown"])


def state_of(row: Mapping[str, Any]) -> LimiterState:
    return LimiterState(
        tokens=row["tokens"], tokens_at=row["tokens_at"], line_at=row["line_at"], paused_until=row["paused_until"],
        pause_reason=row["pause_reason"], breaker=row["breaker"], failures=row["failures"],
        opened_at=row["opened_at"], retry_at=row["retry_at"], probe_job=row["probe_job"],
        probe_token=row["probe_token"])


def _state_params(name: str, st: LimiterState, now: float) -> dict[str, Any]:
    return {"name": name, "tokens": st.tokens, "tokens_at": st.tokens_at, "line_at": st.line_at,
            "paused_until": st.paused_until, "pause_reason": st.pause_reason, "breaker": st.breaker,
            "failures": st.failures, "opened_at": st.opened_at, "retry_at": st.retry_at,
            "probe_job": st.probe_job, "probe_token": st.probe_token, "now": now}


#: Fields of an event's detail that are times: written as ISO 8601 (UTC).
_TIME_FIELDS = frozenset({"until", "retry_at", "was_paused"})


def _iso(value: Any) -> Any:
    return to_datetime(value).isoformat() if isinstance(value, (int, float)) else value


def _wait_message(limiter: str, why: str | None, delay: float) -> str:
    return f"waiting for limiter {limiter!r} ({why or 'limit'}); next turn in {delay:.3g}s"


class LimitsStore(StorePart):
    """The limiter methods of a store (:class:`~firesafe.store.contract.LimiterStore`), written once
    against the driver; a dialect mixin supplies the two steps that differ (``_lim_now``, ``_lim_waits``)."""

    # -- what differs by dialect (implemented by LimitsSQLite / LimitsPostgres) ---------------
    def _lim_now(self, c: Any) -> float:
        """The store's clock, read inside the transaction (after its locks are taken)."""
        raise NotImplementedError

    def _lim_waits(self, c: Any, now: float, waits: list[dict[str, Any]]) -> set[int]:
        """Give attempts back and schedule their jobs at their turns; the job ids that applied."""
        raise NotImplementedError

    # -- shared steps ----------------------------------------------------------------------------
    def _lim_load(self, c: Any, specs: Sequence[LimiterSpec]) -> tuple[float, dict[str, LimiterState]]:
        """Create missing rows, lock the rows (name order), then read the clock and the states."""
        names = sorted(s.name for s in specs)
        rows = c.execute(self.q["limiter_lock"], {"names": self._list(names)}).fetchall()
        missing = set(names) - {r["name"] for r in rows}
        if missing:  # not recorded yet (limiter_sync runs when a worker starts): a full bucket
            now0 = self._lim_now(c)
            for spec in specs:
                if spec.name in missing:
                    c.execute(self.q["limiter_insert"], _spec_params(spec, now0))
            rows = c.execute(self.q["limiter_lock"], {"names": self._list(names)}).fetchall()
        now = self._lim_now(c)
        return now, {r["name"]: state_of(r) for r in rows}

    def _lim_save(self, c: Any, now: float, before: Mapping[str, LimiterState],
                  after: Mapping[str, LimiterState]) -> None:
        for name, st in after.items():
            if before.get(name) != st:
                c.execute(self.q["limiter_save"], _state_params(name, st, now))

    def _lim_events(self, c: Any, now: float, events: list[tuple[str, str, str | None, dict[str, Any],
                                                                   int | None]]) -> None:
        for limiter, kind, actor, detail, job_id in events:
            detail = {k: (_iso(v) if k in _TIME_FIELDS else v) for k, v in detail.items() if v is not None}
            text = json.dumps(detail, sort_keys=True)
            c.execute(self.q["limiter_event_insert"], {"limiter": limiter, "now": now, "kind": kind,
                                                       "actor": actor, "detail": text})
            if job_id is not None:
                c.execute(self.q["event_insert"], {"job_id": job_id, "now": now, "kind": kind, "actor": actor,
                                                   "detail": json.dumps({"limiter": limiter, **detail},
                                                                        sort_keys=True)})

    # -- the contract ------------------------------------------------------------------------
    def limiter_sync(self, specs: Sequence[LimiterSpec]) -> None:
        """Record the declared limiters (their settings, for display); creates missing ones with a
        full bucket. Settings are last-writer-wins; the state (tokens, pause, breaker) is kept."""
        with self._tx() as c:
            now = self._lim_now(c)
            for spec in specs:
                c.execute(self.q["limiter_upsert"], _spec_params(spec, now))

    def limiter_acquire_many(self, specs: Mapping[str, LimiterSpec], items: Sequence[Acquire]) -> list[Grant]:
        """Decide, for claimed jobs in order, which may start under all their limiters now.

        A granted job took a token of each rate limiter and a slot of each concurrency limiter (the
        slot lives as long as its lease). A refused job took nothing, got a turn in the line of the
        limiter that refused it and, with ``defer``, was given back: scheduled at its turn without
        using an attempt, in this same transaction. All or nothing across a job's limiters.
        """
        if not items:
            return []
        used = sorted({n for it in items for n in it.limiters})
        with self._tx() as c:
            now, states = self._lim_load(c, [specs[n] for n in used])
            before = dict(states)
            conc = [n for n in used if specs[n].concurrency is not None]
            live: dict[str, int] = {}
            if conc:
                c.execute(self.q["limiter_slots_prune"], {"names": self._list(conc), "now": now})
                live = {r["limiter"]: r["n"] for r in
                        c.execute(self.q["limiter_slots_count"], {"names": self._list(conc)}).fetchall()}
            alive = {n: self._probe_alive(c, st, now) for n, st in states.items() if st.breaker == bucket.HALF_OPEN}
            grants: list[Grant] = []
            slots: list[dict[str, Any]] = []
            waits: list[dict[str, Any]] = []
            for it in items:
                checks = {n: bucket.check(specs[n], states[n], now, live=0 if it.renew else live.get(n, 0),
                                          probe_alive=alive.get(n, False) and not _probes(states[n], it))
                          for n in it.limiters}
                if all(ch.ok for ch in checks.values()):
                    quiet = all(states[n].breaker == bucket.CLOSED and states[n].failures == 0 for n in it.limiters)
                    probe = False
                    for n in it.limiters:
                        ch = checks[n]
                        states[n] = bucket.take(specs[n], states[n], now,
                                                probe=(it.job_id, it.token) if ch.probe else None)
                        if ch.probe:
                            alive[n] = probe = True
                        if specs[n].concurrency is not None and not it.renew:
                            live[n] = live.get(n, 0) + 1
                            slots.append({"limiter": n, "job_id": it.job_id, "token": it.token})
                    grants.append(Grant(it.job_id, True, probe=probe, quiet=quiet, at=now))
                    continue
                delay, blocker = -1.0, ""
                for n in it.limiters:
                    ch = checks[n]
                    if ch.ok:
                        continue
                    d, states[n] = bucket.defer(specs[n], states[n], now, ch.earliest, it.draw)
                    if d > delay:
                        delay, blocker = d, n
                why = checks[blocker].why
                grants.append(Grant(it.job_id, False, delay, blocker, why, at=now))
                if it.defer:
                    waits.append({"job_id": it.job_id, "token": it.token, "seq": it.seq, "delay": delay,
                                  "reason": REASON_PREFIX + blocker, "error_type": None,
                                  "message": _wait_message(blocker, why, delay), "traceback": None,
                                  "detail": json.dumps({"limiter": blocker, "why": why,
                                                        "wait": round(delay, 6)})})
            if slots:
                self._exec_many(c, "limiter_slot_take", slots)
            applied = self._lim_waits(c, now, waits) if waits else set()
            self._lim_save(c, now, before, states)
        deferred = {w["job_id"] for w in waits}
        return [replace(g, applied=g.job_id in applied) if g.job_id in deferred else g for g in grants]

    def _probe_alive(self, c: Any, st: LimiterState, now: float) -> bool:
        if st.probe_job is None:
            return False
        row = c.execute(self.q["limiter_job_live"], {"job_id": st.probe_job, "token": st.probe_token,
                                                     "now": now}).fetchone()
        return bool(row and row["n"])

    def limiter_report_many(self, specs: Mapping[str, LimiterSpec], items: Sequence[Report]) -> list[Verdict]:
        """Apply how attempts ended to their limiters: Retry-After pauses, breaker counts, probes.

        An item whose verdict ``waits`` and that carries its concluded ``finish`` is given back in
        this same transaction (no attempt used; its trace entry keeps the error) and scheduled at
        its turn: the limiter was paused by it, or its breaker was already open.
        """
        if not items:
            return []
        used = sorted({n for it in items for n in it.limiters})
        with self._tx() as c:
            now, states = self._lim_load(c, [specs[n] for n in used])
            before = dict(states)
            verdicts: list[Verdict] = []
            waits: list[dict[str, Any]] = []
            events: list[tuple[str, str, str | None, dict[str, Any], int | None]] = []
            for it in items:
                pause_until = it.pause_until if it.pause_until is not None else (
                    now + it.pause_for if it.pause_for is not None else None)
                wait_until: float | None = None
                blocker = ""
                for n in it.limiters:
                    r = bucket.report(specs[n], states[n], now, it.outcome, job=(it.job_id, it.token),
                                      pause_until=pause_until)
                    states[n] = r.state
                    for kind, detail in r.events:
                        events.append((n, kind, None, {**detail, "job": it.key}, it.job_id))
                    if r.wait_until is not None and (wait_until is None or r.wait_until > wait_until):
                        wait_until, blocker = r.wait_until, n
                if it.release:
                    for n in it.limiters:
                        c.execute(self.q["limiter_slot_release"], {"limiter": n, "job_id": it.job_id,
                                                                   "token": it.token})
                if wait_until is not None:  # a pause or an open breaker: a turn in the line
                    delay, states[blocker] = bucket.defer(specs[blocker], states[blocker], now, wait_until,
                                                          it.draw)
                    delay = max(delay, it.wait_for or 0.0)
                elif it.wait_for is not None:  # a turn the job was already given (a refused ctx.limit)
                    delay, blocker = it.wait_for, it.limiters[0]
                else:
                    verdicts.append(Verdict(it.job_id, False))
                    continue
                verdicts.append(Verdict(it.job_id, True, delay, blocker))
                if it.finish is not None:
                    fin = it.finish
                    detail = json.loads(fin.detail) if fin.detail else {}
                    why = "paused" if pause_until is not None else (
                        "breaker" if states[blocker].breaker != bucket.CLOSED else "limit")
                    detail["limiter"] = {"name": blocker, "wait": round(delay, 6), "why": why}
                    waits.append({"job_id": it.job_id, "token": it.token, "seq": it.seq, "delay": delay,
                                  "reason": REASON_PREFIX + blocker, "error_type": fin.error_type,
                                  "message": fin.message, "traceback": fin.traceback,
                                  "detail": json.dumps(detail)})
            applied = self._lim_waits(c, now, waits) if waits else set()
            self._lim_save(c, now, before, states)
            self._lim_events(c, now, events)
        written = {w["job_id"] for w in waits}
        return [replace(v, applied=v.job_id in applied) if v.job_id in written else v for v in verdicts]

    def limiter_retry_after(self, specs: Mapping[str, LimiterSpec], limiters: Sequence[str], seconds: float, *,
                            job_id: int | None = None, key: str | None = None) -> float:
        """Pause ``limiters`` for every worker for ``seconds`` from now, as a provider's Retry-After
        asks, the moment a job meets it; returns when the pause ends (the store's clock). The job's
        attempt is not touched here: its outcome is saved later with this pause
        (``Report.pause_until``), which then adds nothing to it. A pause only ever grows."""
        names = sorted(set(limiters))
        with self._tx() as c:
            now, states = self._lim_load(c, [specs[n] for n in names])
            after: dict[str, LimiterState] = {}
            events: list[tuple[str, str, str | None, dict[str, Any], int | None]] = []
            for n in names:
                after[n], started = bucket.pause(states[n], now, now + seconds, "retry_after")
                if started:
                    events.append((n, "paused", None, {"until": after[n].paused_until, "reason": "retry_after",
                                                       "seconds": round(seconds, 3), "job": key}, job_id))
            self._lim_save(c, now, states, after)
            self._lim_events(c, now, events)
        return max(st.paused_until or now + seconds for st in after.values())

    def _lim_one(self, c: Any, name: str) -> tuple[LimiterSpec, LimiterState, float]:
        rows = c.execute(self.q["limiter_lock"], {"names": self._list([name])}).fetchall()
        if not rows:
            known = ", ".join(r["name"] for r in c.execute(self.q["limiter_names"], {}).fetchall()) or "none"
            raise InvalidInput(f"no limiter named {name!r} in this store (known: {known}); a worker records the "
                               "limiters its app declares when it starts")
        return spec_of(rows[0]), state_of(rows[0]), self._lim_now(c)

    def limiter_pause(self, name: str, *, seconds: float | None = None, until: float | None = None,
                      reason: str | None = None, actor: str | None = None) -> LimiterStatus:
        """Pause a limiter for every worker until ``until`` (or ``seconds`` from now); a pause only grows."""
        if (seconds is None) == (until is None):
            raise InvalidInput("give seconds or until, not both (and not neither)")
        if seconds is not None and not seconds >= 0:
            raise InvalidInput(f"a pause needs seconds >= 0, not {seconds!r}")
        with self._tx() as c:
            _spec, st, now = self._lim_one(c, name)
            end = now + seconds if seconds is not None else float(until) if until is not None else now
            new, started = bucket.pause(st, now, end, reason or "manual")
            if new != st:
                self._lim_save(c, now, {name: st}, {name: new})
                self._lim_events(c, now, [(name, "paused", actor, {"until": new.paused_until,
                                                                   "reason": reason or "manual",
                                                                   "extended": not started}, None)])
        return self._lim_status(name)

    def limiter_resume(self, name: str, *, actor: str | None = None,
                       reason: str | None = None) -> tuple[LimiterStatus, int]:
        """Lift a pause and close the breaker now; jobs waiting for the limiter are released at its
        pace (spread over the line). Returns the status and how many waiting jobs were released.
        The ``resumed`` event records ``actor`` and, in its detail, ``reason``."""
        with self._tx() as c:
            spec, st, now = self._lim_one(c, name)
            released = c.execute(self.q["limiter_jobs_release"], {"reason": REASON_PREFIX + name, "now": now,
                                                                  "spacing": spec.spacing}).rowcount
            new = bucket.resume(st, now)
            new = replace(new, line_at=now + max(released, 0) * spec.spacing)
            self._lim_save(c, now, {name: st}, {name: new})
            detail = {"released": released, "was_paused": st.paused_until, "was_breaker": st.breaker}
            if reason is not None:
                detail["reason"] = reason
            self._lim_events(c, now, [(name, "resumed", actor, detail, None)])
        return self._lim_status(name), max(released, 0)

    def _lim_status(self, name: str) -> LimiterStatus:
        found = [s for s in self.limiter_list() if s.name == name]
        return found[0]

    def limiter_list(self) -> list[LimiterStatus]:
        """Every limiter recorded in the store, with tokens now, slots in use and jobs waiting."""
        now = self._lim_clock()
        out = []
        for r in self._read("limiter_list", {"now": now}):
            spec, st = spec_of(r), state_of(r)
            out.append(LimiterStatus(
                name=spec.name, rate=spec.rate, burst=spec.burst, concurrency=spec.concurrency,
                breaker_after=spec.breaker_after, cooldown=spec.cooldown,
                tokens=round(bucket.tokens_now(spec, st, now), 3) if spec.rate is not None else None,
                in_flight=r["in_flight"], waiting=r["waiting"],
                paused_until=to_datetime(st.paused_until) if st.paused_until and st.paused_until > now else None,
                pause_reason=st.pause_reason if st.paused_until and st.paused_until > now else None,
                breaker=st.breaker, failures=st.failures, retry_at=to_datetime(st.retry_at),
                updated_at=to_datetime(r["updated_at"])))
        return out

    def _lim_clock(self) -> float:
        return float(self.now())

    def limiter_event_list(self, after_id: int = 0, limiter: str | None = None, limit: int = 100, *,
                           newest: bool = False) -> list[LimiterEvent]:
        """Limiter events with an id above ``after_id``, oldest first (a consumer keeps the last id it
        read); with ``newest``, the latest ``limit`` events, still oldest first."""
        query = "limiter_event_latest" if newest else "limiter_event_list"
        rows = self._read(query, {"after": after_id, "limiter": limiter, "limit": limit})
        if newest:
            rows = list(reversed(rows))
        return [LimiterEvent(r["id"], r["limiter"], to_datetime(r["at"]), r["kind"], r["actor"],
                             json.loads(r["detail"]) if r["detail"] else {}) for r in rows]


def _probes(st: LimiterState, it: Acquire) -> bool:
    """Whether the job asking is the breaker's probe already (renewing its grant)."""
    return it.renew and st.probe_job == it.job_id and st.probe_token == it.token


def _spec_params(spec: LimiterSpec, now: float) -> dict[str, Any]:
    return {"name": spec.name, "rate": spec.rate, "burst": float(spec.burst), "concurrency": spec.concurrency,
            "breaker_after": spec.breaker_after, "cooldown": float(spec.cooldown), "now": now}

