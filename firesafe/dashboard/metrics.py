"""``/metrics`` in the Prometheus text format, read from the store at each scrape.

Every figure is a gauge of what the store holds now, so several dashboards (or restarts) report the
same numbers and nothing is lost between scrapes. Attempts are counted over the attempts the store
still keeps (retention prunes finished jobs with their trace), which is why they are gauges too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from firesafe.dashboard import parts
from firesafe.dashboard.charts import FAILED
from firesafe.errors import FiresafeError
from firesafe.states import State

log = logging.getLogger("firesafe.dashboard")


class StoreCollector:
    """Collects firesafe's gauges from one app's store."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def describe(self) -> list[Metric]:
        return []  # do not query the store when the collector is registered

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily("firesafe_store_up", "1 if the store answered this scrape, else 0")
        try:
            store = self.app.store  # opening it may fail too: a store a newer firesafe migrated, say
            stats = store.job_stats()
            lags = store.queue_lags()
            dead = store.dead_groups(limit=10_000)
            attempts = store.attempt_counts()
            workers = store.worker_list()
            now = store.now()
        except FiresafeError as exc:
            log.warning("metrics: the store did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up

        jobs = GaugeMetricFamily("firesafe_jobs", "Jobs in the store by queue and state", labels=["queue", "state"])
        seen = set()
        for queue, state, n in stats:
            jobs.add_metric([queue, state], n)
            seen.add((queue, state))
        for queue in {q for q, _, _ in stats}:  # every state of every queue, so absent series read 0
            for state in State:
                if (queue, str(state)) not in seen:
                    jobs.add_metric([queue, str(state)], 0)
        yield jobs

        runnable = GaugeMetricFamily("firesafe_queue_runnable", "Jobs runnable now, by queue", labels=["queue"])
        lag = GaugeMetricFamily("firesafe_queue_lag_seconds",
                                "How long the oldest runnable job of a queue has waited", labels=["queue"])
        for row in lags:
            runnable.add_metric([row.queue], row.runnable)
            lag.add_metric([row.queue], row.lag)
        for queue in {q for q, _, _ in stats} - {row.queue for row in lags}:
            runnable.add_metric([queue], 0)
            lag.add_metric([queue], 0)
        yield runnable
        yield lag

        size = GaugeMetricFamily("firesafe_dead_letters", "Jobs in the dead-letter queue",
                                 labels=["job", "error_type"])
        for g in dead:
            size.add_metric([g.name, g.error_type or ""], g.count)
        yield size
        total = GaugeMetricFamily("firesafe_dead_letters_size", "All jobs in the dead-letter queue")
        total.add_metric([], sum(g.count for g in dead))
        yield total

        by_outcome = GaugeMetricFamily("firesafe_attempts", "Attempts kept in the store, by job name and outcome",
                                       labels=["job", "outcome"])
        failures: dict[str, int] = {}
        for name, outcome, n in attempts:
            by_outcome.add_metric([name, outcome], n)
            failures[name] = failures.get(name, 0) + (n if outcome in FAILED else 0)
        yield by_outcome
        failed = GaugeMetricFamily("firesafe_attempt_failures",
                                   "Failed attempts (failed, timed out, lost) kept in the store, by job name",
                                   labels=["job"])
        for name, n in sorted(failures.items()):
            failed.add_metric([name], n)
        yield failed

        alive = GaugeMetricFamily("firesafe_workers", "Workers whose last heartbeat is recent")
        stale = max(3 * getattr(self.app, "lease", 30.0), 30.0)
        alive.add_metric([], sum(1 for w in workers if now - float(w["last_seen"]) <= stale))
        yield alive
        beat = GaugeMetricFamily("firesafe_worker_heartbeat_age_seconds", "Seconds since each worker's heartbeat",
                                 labels=["worker", "host"])
        for w in workers:
            beat.add_metric([str(w["id"]), str(w["host"])], max(0.0, now - float(w["last_seen"])))
        yield beat

        yield from _part_metrics(self.app)

        took = GaugeMetricFamily("firesafe_metrics_scrape_seconds", "How long reading the store took")
        took.add_metric([], time.perf_counter() - started)
        yield took


def _part_metrics(app: Any) -> Iterator[Metric]:
    """Limiter and alert figures, for the parts this app has configured."""
    view = parts.limiters(app)
    if view is not None and not view.error:
        labels = ["limiter"]
        waiting = GaugeMetricFamily("firesafe_limiter_waiting", "Jobs waiting for a limiter (no attempt used)",
                                    labels=labels)
        tokens = GaugeMetricFamily("firesafe_limiter_tokens", "Tokens in a limiter's bucket now", labels=labels)
        in_flight = GaugeMetricFamily("firesafe_limiter_in_flight", "Attempts holding a limiter's slots", labels=labels)
        is_open = GaugeMetricFamily("firesafe_limiter_breaker_open", "1 while a limiter's breaker is not closed",
                                    labels=labels)
        paused = GaugeMetricFamily("firesafe_limiter_paused", "1 while a limiter is paused", labels=labels)
        for row in view.rows:
            name = [row["name"]]
            waiting.add_metric(name, row["waiting"] or 0)
            in_flight.add_metric(name, row["in_flight"] or 0)
            if row["tokens"] is not None:
                tokens.add_metric(name, row["tokens"])
            is_open.add_metric(name, 0 if row["breaker"] == "closed" else 1)
            paused.add_metric(name, 1 if row["paused_until"] is not None else 0)
        yield from (waiting, tokens, in_flight, is_open, paused)
    view = parts.alerts(app, limit=500)
    if view is not None and not view.error:
        deliveries = GaugeMetricFamily("firesafe_alert_deliveries",
                                       "Deliveries of the last 500 alerts, by sink and state", labels=["sink", "state"])
        counts: dict[tuple[str, str], int] = {}
        for record in view.rows:
            for d in record.deliveries:
                counts[(d.sink, d.state)] = counts.get((d.sink, d.state), 0) + 1
        for (sink, state), n in sorted(counts.items()):
            deliveries.add_metric([sink, state], n)
        yield deliveries
        if view.extra.get("waiting") is not None:
            waiting_events = GaugeMetricFamily("firesafe_alert_events_waiting",
                                               "Alert events in the outbox not yet grouped into alerts")
            waiting_events.add_metric([], view.extra["waiting"])
            yield waiting_events


def registry_for(app: Any) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one), holding this app's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(app))
    return registry


def metrics_endpoint(app: Any) -> Callable[[Request], Awaitable[Response]]:
    registry = registry_for(app)

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)

    return metrics
