"""The alerts of one app: its sinks and rules, grouping, delivery, and the dispatcher duty.

Guarantees: an alert event is in the outbox iff the transaction of the event that raised it
committed (the stores write both together); every event joins exactly one alert (fenced); each
alert is delivered to each sink at least once unless it keeps failing for ``give_up_after``
(receivers deduplicate on the alert id); a sink that is down or hangs delays only its own
deliveries, never job processing (the dispatcher runs in threads of its own).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, overload

from firesafe.alerts import render
from firesafe.alerts.grouping import KINDS, Event, next_ready, plan, rate_transition, stuck_reason
from firesafe.alerts.policy import verdict
from firesafe.alerts.sinks import DeliveryError, Sink, unique_names
from firesafe.alerts.store import AlertRecord, NewAlert, OutboxEvent
from firesafe.errors import ConfigError, StoreError
from firesafe.hooks import Hook
from firesafe.masking import mask_text
from firesafe.retries.backoff import Backoff

if TYPE_CHECKING:
    from firesafe.app import App

log = logging.getLogger("firesafe.alerts")

LEADER = "alerts"


@overload
def _seconds(value: timedelta | float | int | None, what: str, *, allow_none: Literal[False]) -> float: ...
@overload
def _seconds(value: timedelta | float | int | None, what: str, *, allow_none: bool = True) -> float | None: ...
def _seconds(value: timedelta | float | int | None, what: str, *, allow_none: bool = True) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise ConfigError(f"alert_rules: {what} cannot be None")
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
        raise ConfigError(f"alert_rules: {what} must be a positive duration (a timedelta or seconds)")
    return float(seconds)


@dataclass(frozen=True)
class Rules:
    """What raises alerts and how they are grouped and delivered (see ``App.alert_rules``)."""

    failure_rate: float | None = 0.5
    failure_window: float = 600.0
    min_attempts: int = 20
    stuck_after: float | None = 900.0
    group_wait: float = 5.0
    group_interval: float = 60.0
    delivery_backoff: Backoff = field(default_factory=lambda: Backoff(base=1.0, factor=2.0, cap=60.0,
                                                                      jitter="equal"))
    give_up_after: float = 86400.0
    evaluate_every: float = 10.0
    keep: float = 30 * 86400.0
    dispatch: bool = True
    poll: float = 0.5
    dashboard_url: str | None = None


class Alerts(Hook):
    """The alerts of an app: ``app.alerts``. Sinks come from ``App(alerts=[...])``, rules from
    ``app.alert_rules(...)``; workers dispatch them (``dispatch()`` runs one pass by hand): the app
    registers it as a hook whose duty is the dispatcher."""

    def __init__(self, app: App, sinks: Sequence[Sink]) -> None:
        self.app = app
        self.sinks: list[Sink] = unique_names(sinks)
        self.rules = Rules()
        self._rules_set = False
        self._random = random.Random()
        self._wake = threading.Event()
        #: Seconds after the last :meth:`group` until another pass can send anything.
        self.next_group_in = 0.0

    @property
    def active(self) -> bool:
        """Whether workers run the dispatcher: sinks or rules were configured, and dispatch is on."""
        return (bool(self.sinks) or self._rules_set) and self.rules.dispatch

    def configure(self, **options: Any) -> Rules:
        """Set the rules (see ``App.alert_rules``); unknown options are a clear error."""
        known = {f for f in Rules.__dataclass_fields__}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"alert_rules: unknown option(s) {', '.join(unknown)}; "
                              f"use {', '.join(sorted(known))}")
        return self._configure(**options)

    def _configure(self, *, failure_rate: float | None = 0.5, failure_window: timedelta | float = 600.0,
                  min_attempts: int = 20, stuck_after: timedelta | float | None = 900.0,
                  group_wait: timedelta | float = 5.0, group_interval: timedelta | float = 60.0,
                  delivery_backoff: Backoff | None = None, give_up_after: timedelta | float = 86400.0,
                  evaluate_every: timedelta | float = 10.0, keep: timedelta | float = 30 * 86400.0,
                  dispatch: bool = True, poll: float = 0.5, dashboard_url: str | None = None) -> Rules:
        if failure_rate is not None and (not isinstance(failure_rate, (int, float)) or not 0 < failure_rate < 1):
            raise ConfigError("alert_rules: failure_rate must be a fraction between 0 and 1 (or None to turn it off)")
        if not isinstance(min_attempts, int) or min_attempts < 1:
            raise ConfigError("alert_rules: min_attempts must be a whole number >= 1")
        if delivery_backoff is not None and not isinstance(delivery_backoff, Backoff):
            raise ConfigError("alert_rules: delivery_backoff must be a firesafe.Backoff")
        if dashboard_url is not None and not (isinstance(dashboard_url, str)
                                              and dashboard_url.startswith(("http://", "https://"))):
            raise ConfigError("alert_rules: dashboard_url must be an http(s) URL, like https://ops.example.com/firesafe")
        wait = group_wait.total_seconds() if isinstance(group_wait, timedelta) else group_wait
        if not isinstance(wait, (int, float)) or wait < 0:
            raise ConfigError("alert_rules: group_wait must be a duration >= 0")
        self.rules = Rules(
            failure_rate=float(failure_rate) if failure_rate is not None else None,
            failure_window=_seconds(failure_window, "failure_window", allow_none=False),
            min_attempts=min_attempts,
            stuck_after=_seconds(stuck_after, "stuck_after"),
            group_wait=float(wait),
            group_interval=_seconds(group_interval, "group_interval", allow_none=False),
            delivery_backoff=delivery_backoff or Rules().delivery_backoff,
            give_up_after=_seconds(give_up_after, "give_up_after", allow_none=False),
            evaluate_every=_seconds(evaluate_every, "evaluate_every", allow_none=False),
            keep=_seconds(keep, "keep", allow_none=False),
            dispatch=bool(dispatch),
            poll=_seconds(poll, "poll", allow_none=False),
            dashboard_url=dashboard_url.rstrip("/") if dashboard_url else None,
        )
        self._rules_set = True
        return self.rules

    def sink(self, name: str) -> Sink:
        for s in self.sinks:
            if s.name == name:
                return s
        raise ConfigError(f"no alert sink named {name!r} (sinks: {', '.join(s.name for s in self.sinks) or 'none'})")

    # -- recording ---------------------------------------------------------------------------
    def record(self, kind: str, *, job_name: str | None = None, keys: Sequence[str] = (),
               payload: dict[str, Any] | None = None, severity: str | None = None,
               dedupe: str | None = None) -> bool:
        """Put an alert event in the outbox, in a transaction of its own (see ``store.alert_record``)."""
        return self.app.store.alert_record(kind, severity, job_name, keys, payload, dedupe=dedupe)

    # -- grouping ----------------------------------------------------------------------------
    def group(self, *, force: bool = False, kinds: Sequence[str] | None = None, limit: int = 5000) -> list[int]:
        """Turn pending events into alerts (one per kind and job name that is ready); their ids.

        ``force`` ignores ``group_wait`` and ``group_interval``.
        """
        store: Any = self.app.store
        rules = self.rules
        pending: list[OutboxEvent] = store.alert_pending(limit)
        if kinds is not None:
            pending = [e for e in pending if e.kind in kinds]
        if not pending:
            self.next_group_in = rules.group_wait
            return []
        now = store.now()
        last = {} if force else store.alert_last_sent(now - rules.group_interval)
        events = [self._event(e) for e in pending]
        batches = plan(events, last, now, wait=rules.group_wait, interval=rules.group_interval, force=force)
        sent = {i for b in batches for i in b.event_ids}
        self.next_group_in = next_ready([e for e in events if e.id not in sent], last, now, wait=rules.group_wait,
                                        interval=rules.group_interval)
        by_id = {e.id: e for e in pending}
        created = []
        for b in batches:
            members = [by_id[i] for i in b.event_ids]
            doc = self._document(b.kind, b.job_name, b.severity, members)
            spec = KINDS.get(b.kind)
            status = spec.status if spec else "firing"
            if b.muted:  # recorded (alerts ls, the dashboard), sent to no sink
                doc["muted"] = True
                status = "muted"
            sinks = [] if b.muted else [s.name for s in self.sinks if s.accepts(b.kind, b.severity)]
            alert_id = store.alert_create(NewAlert(
                kind=b.kind, severity=b.severity, status=status, job_name=b.job_name,
                count=b.count, first_at=b.first_at, last_at=b.last_at, title=doc["title"],
                document=json.dumps(doc, sort_keys=True, default=str), event_ids=b.event_ids,
                sinks=sinks))
            if alert_id is None:
                log.debug("events of %s/%s were grouped by another dispatcher", b.kind, b.job_name)
                continue
            created.append(alert_id)
        if created:
            self._wake.set()
        return created

    def _event(self, e: OutboxEvent) -> Event:
        """The event as grouping sees it, with the verdict of its job's alert policy."""
        job = self.app.jobs.get(e.job_name) if e.job_name else None
        v = verdict(e.kind, e.payload, getattr(job, "alert", None), e.severity)
        return Event(e.id, e.kind, e.job_name, v.severity, e.created_at, v.muted)

    def _document(self, kind: str, job_name: str | None, severity: str, events: list[OutboxEvent]) -> dict[str, Any]:
        store: Any = self.app.store
        jobs, steps = [], {}
        for key in render.sample_keys(events):
            job = store.job_get(key, full=True)
            if job is None:  # pruned meanwhile: its event still says what happened
                continue
            jobs.append(job)
            try:
                steps[key] = store.step_list(job.id)
            except NotImplementedError:
                pass
        return render.build(kind, job_name, severity, events, jobs, steps, dashboard=self.rules.dashboard_url)

    # -- delivery ----------------------------------------------------------------------------
    def deliver(self, sink: Sink | str | None = None, *, limit: int = 10, alert_id: int | None = None
                ) -> list[tuple[int, str, str | None]]:
        """Deliver what is due, to one sink or all; ``[(alert id, sink name, error or None)]``."""
        sinks = [self.sink(sink) if isinstance(sink, str) else sink] if sink is not None else self.sinks
        done: list[tuple[int, str, str | None]] = []
        for s in sinks:
            done += self._deliver_to(s, limit, alert_id)
        return done

    def _deliver_to(self, sink: Sink, limit: int, alert_id: int | None) -> list[tuple[int, str, str | None]]:
        store: Any = self.app.store
        lease = (sink.timeout + 5.0) * limit + 30.0
        claims = store.alert_delivery_claim(sink.name, limit, lease, alert_id)
        out: list[tuple[int, str, str | None]] = []
        skip_delay: float | None = None
        for c in claims:
            if skip_delay is not None:  # an earlier alert to this sink just failed: do not hammer it
                store.alert_delivery_finish(c.alert_id, sink.name, c.token, "pending", 0, skip_delay, None)
                continue
            error: str | None = None
            started = time.monotonic()
            try:
                sink.deliver({**c.document, "id": c.alert_id}, c.attempts + 1)
            except DeliveryError as exc:
                error = str(exc)
            except Exception as exc:  # a bug in a sink must not stop the dispatcher
                error = f"{type(exc).__name__}: {exc}"
            if error is None:
                store.alert_delivery_finish(c.alert_id, sink.name, c.token, "delivered", 1, None, None)
                log.debug("alert %d delivered to %s in %.3fs", c.alert_id, sink.name, time.monotonic() - started)
                out.append((c.alert_id, sink.name, None))
                continue
            error = mask_text(error)[:1000]
            give_up = store.now() - c.created_at >= self.rules.give_up_after
            delay = self.rules.delivery_backoff.delay(c.attempts + 1, self._random.random())
            store.alert_delivery_finish(c.alert_id, sink.name, c.token, "failed" if give_up else "pending", 1,
                                        None if give_up else delay, error)
            if give_up:
                log.error("alert %d to %s failed for good after %d attempts: %s", c.alert_id, sink.name,
                          c.attempts + 1, error)
            else:
                log.warning("alert %d to %s failed (attempt %d, next in %.1fs): %s", c.alert_id, sink.name,
                            c.attempts + 1, delay, error)
                skip_delay = delay
            out.append((c.alert_id, sink.name, error))
        return out

    # -- rules -------------------------------------------------------------------------------
    def evaluate(self) -> int:
        """Check the failure-rate and stuck-queue rules once; how many events they recorded."""
        store: Any = self.app.store
        rules = self.rules
        now = store.now()
        recorded = 0
        if rules.failure_rate is not None:
            since = now - rules.failure_window
            counts = store.alert_failure_counts(since)
            firing = store.alert_conditions("failure_rate")
            for name in sorted(set(counts) | {s for s, f in firing.items() if f}):
                total, failures = counts.get(name, (0, 0))
                move = rate_transition(firing.get(name, False), failures, total, rules.failure_rate,
                                       rules.min_attempts)
                if move is None:
                    continue
                payload = {"job": name, "rate": round(failures / total, 4) if total else 0.0, "failures": failures,
                           "attempts": total, "threshold": rules.failure_rate, "window_seconds": rules.failure_window}
                keys = store.alert_failed_keys(name, since, render.MAX_JOBS) if move == "fire" else []
                kind = "failure_rate" if move == "fire" else "failure_rate_resolved"
                recorded += store.alert_condition_set("failure_rate", name, move == "fire", kind, name, keys, payload)
        if rules.stuck_after is not None:
            backlog = {b.queue: b for b in store.alert_queue_backlog()}
            firing = store.alert_conditions("queue_stuck")
            grace = 2 * self.app.lease
            live: dict[str, int] = {}
            for w in store.worker_list():
                if w["last_seen"] >= now - grace:
                    for q in str(w["queues"]).split(","):
                        live[q] = live.get(q, 0) + 1
            for queue in sorted(set(backlog) | {s for s, f in firing.items() if f}):
                b = backlog.get(queue)
                age = max(0.0, now - b.oldest_run_at) if b else None
                reason = stuck_reason(age, live.get(queue, 0), rules.stuck_after, grace)
                was = firing.get(queue, False)
                if (reason is not None) == was:
                    continue
                payload = {"queue": queue, "reason": reason, "oldest_waiting_seconds": round(age or 0.0, 3),
                           "runnable": b.runnable if b else 0, "live_workers": live.get(queue, 0),
                           "stuck_after_seconds": rules.stuck_after}
                kind = "queue_stuck" if reason else "queue_stuck_resolved"
                recorded += store.alert_condition_set("queue_stuck", queue, reason is not None, kind, None, [],
                                                      payload)
        return recorded

    # -- by hand -----------------------------------------------------------------------------
    def dispatch(self, *, force: bool = False) -> list[tuple[int, str, str | None]]:
        """One pass of what a worker's dispatcher does: evaluate the rules, group, deliver what is due."""
        self.evaluate()
        self.group(force=force)
        return self.deliver(limit=100)

    def flush(self, timeout: float = 30.0) -> list[tuple[int, str, str | None]]:
        """Group every pending event now and deliver everything due (scripts, tests, shutdown)."""
        self.group(force=True)
        deadline = time.monotonic() + timeout
        done: list[tuple[int, str, str | None]] = []
        while time.monotonic() < deadline:
            batch = self.deliver(limit=100)
            if not batch:
                break
            done += batch
        return done

    def test(self) -> dict[str, str | None]:
        """Send a test alert to every sink now; ``{sink name: None if delivered, else the error}``."""
        import os
        import socket

        if not self.sinks:
            raise ConfigError("no alert sinks are configured: App(..., alerts=[Log(), Webhook(...), ...])")
        self.record("test", payload={"message": "a test alert sent by `firesafe alerts test`",
                                     "host": socket.gethostname(), "pid": os.getpid()})
        ids = self.group(force=True, kinds=["test"])
        results: dict[str, str | None] = {s.name: "not delivered (no due delivery found)" for s in self.sinks}
        for alert_id in ids:
            for s in self.sinks:
                for _, name, error in self._deliver_to(s, 1, alert_id):
                    results[name] = error
        return results

    def list(self, limit: int = 50, kind: str | None = None) -> builtins.list[AlertRecord]:
        """Alerts, newest first, with the delivery of each to each sink."""
        return self.app.store.alert_list(limit, kind)

    def history(self, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """Recent alerts as flat rows (for tables and the dashboard): one line of delivery status each."""
        rows = []
        for a in self.list(limit=limit):
            delivery = "; ".join(
                f"{d.sink}: {d.state}" + (f" ({d.attempts} attempts)" if d.attempts > 1 else "")
                + (f": {d.last_error}" if d.last_error and d.state != "delivered" else "") for d in a.deliveries)
            rows.append({"id": a.id, "created_at": render.iso(a.created_at), "severity": a.severity,
                         "status": a.status, "kind": a.kind, "job": a.job_name, "count": a.count, "title": a.title,
                         "delivery": delivery or undelivered_note(a, bool(self.sinks))})
        return rows

    def prune(self) -> int:
        return self.app.store.alert_prune(self.rules.keep)

    # -- the duty ----------------------------------------------------------------------------
    def start_duty(self, worker: Any) -> Callable[[], None] | None:
        """The worker's duty (:class:`firesafe.Hook`): the dispatcher, under the worker's id."""
        return self.start_dispatcher(getattr(worker, "id", f"pid-{id(worker)}"))

    def start_dispatcher(self, holder: str) -> Callable[[], None] | None:
        """Run the dispatcher in this process (threads of its own) under the name ``holder``; returns
        its stop function, or None when there is nothing to dispatch (no sinks or rules, or
        ``dispatch=False``). Workers run it; so do ``firesafe dashboard`` and ``firesafe serve``, so
        that alerts leave (and the stuck-queue rule is checked) while no worker runs."""
        if not self.active:
            return None
        dispatcher = Dispatcher(self, holder)
        dispatcher.start()
        return dispatcher.stop

    @contextlib.contextmanager
    def dispatching(self, holder: str, enabled: bool = True) -> Iterator[bool]:
        """Run the dispatcher while the block runs (if ``enabled`` and there is anything to
        dispatch); yields whether it runs."""
        stop = self.start_dispatcher(holder) if enabled else None
        try:
            yield stop is not None
        finally:
            if stop is not None:
                stop()


def undelivered_note(a: AlertRecord, sinks: bool | None = None) -> str:
    """What the delivery column says of an alert that went to no sink (``sinks``: whether the app
    that tells has any; None: not known, the app was opened from its store alone).

    >>> from firesafe.alerts.store import AlertRecord
    >>> undelivered_note(AlertRecord(1, "dead_letter", "info", "muted", "charge", 3, 0, 0, "t", 0, {}))
    'muted: recorded, sent to no sink'
    """
    if a.status == "muted":
        return "muted: recorded, sent to no sink"
    if sinks is None:
        return "sent to no sink"
    return f"no sink takes {a.severity} alerts" if sinks else "no sink configured"


class Dispatcher:
    """The background duty of a worker that delivers alerts (invariant 7: a small loop; the part
    that must run once per cluster, grouping and rules, holds the ``alerts`` leader lease).

    One thread groups and evaluates (when it leads); one thread per sink delivers, so a sink that
    hangs delays only itself. Nothing here runs on the worker's loop thread.
    """

    LEADER_TTL = 15.0

    def __init__(self, alerts: Alerts, holder: str) -> None:
        self.alerts = alerts
        self.holder = holder
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._random = random.Random()

    def start(self) -> None:
        targets: list[tuple[str, Callable[[], None]]] = [("firesafe-alerts", self._lead)]
        for s in self.alerts.sinks:
            targets.append((f"firesafe-alerts-{s.name}", functools.partial(self._deliver, s)))
        for name, target in targets:
            t = threading.Thread(target=self._guard(target), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the threads; a delivery in flight may outlive this (its lease then expires and it is
        retried: at least once)."""
        self._stop.set()
        self.alerts._wake.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        try:
            self.alerts.app.store.leader_release(LEADER, self.holder)
        except StoreError:
            pass

    def _guard(self, loop: Callable[[], None]) -> Callable[[], None]:
        backoff = Backoff(base=0.5, factor=2.0, cap=15.0, jitter="equal")

        def run() -> None:
            faults = 0
            while not self._stop.is_set():
                try:
                    loop()
                    return
                except StoreError as exc:
                    faults += 1
                    pause = backoff.delay(faults, self._random.random())
                    log.warning("alerts: store fault (%s); retrying in %.1fs", exc, pause)
                except Exception:  # a bug: log it and keep the duty alive
                    faults += 1
                    pause = backoff.delay(faults, self._random.random())
                    log.exception("alerts: dispatcher error; retrying in %.1fs", pause)
                self._stop.wait(pause)

        return run

    def _lead(self) -> None:
        alerts = self.alerts
        store = alerts.app.store
        leading_until = 0.0
        next_eval = next_prune = next_group = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= leading_until - self.LEADER_TTL * 2 / 3:
                if store.leader_acquire(LEADER, self.holder, self.LEADER_TTL):
                    leading_until = now + self.LEADER_TTL
                else:
                    leading_until = 0.0
            if leading_until > now:
                if now >= next_eval:
                    alerts.evaluate()
                    next_eval = now + alerts.rules.evaluate_every
                if now >= next_group:  # not before a pending group can be ready: a storm is read rarely
                    alerts.group()
                    next_group = time.monotonic() + alerts.next_group_in
                if now >= next_prune:
                    alerts.prune()
                    next_prune = now + max(alerts.app.prune_interval, 60.0)
            self._stop.wait(alerts.rules.poll)

    def _deliver(self, sink: Sink) -> None:
        """Deliver what is due to one sink. While the sink fails, this dispatcher backs off as a whole
        and then probes it with a single delivery, so an outage costs the store one claim and one
        record per backoff period, not one per pending alert."""
        alerts = self.alerts
        failures = 0
        while not self._stop.is_set():
            done = alerts.deliver(sink, limit=1 if failures else 10)
            if done and all(error is not None for _, _, error in done):
                failures += 1
                self._stop.wait(alerts.rules.delivery_backoff.delay(failures, self._random.random()))
                continue
            if done:
                failures = 0
            else:
                alerts._wake.wait(alerts.rules.poll)
                alerts._wake.clear()


