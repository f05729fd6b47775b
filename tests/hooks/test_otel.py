"""The OpenTelemetry hook (firesafe/otel.py), with the SDK's in-memory exporter, on both stores.

Given an app with the hook, when jobs enqueued inside a span are run by a real worker, then each
attempt is a span with the job's attributes and its outcome, a failed attempt's span has the error
status, and it links to (or, asked, is the child of) the span that enqueued the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from firesafe import App, Backoff, FakeClock, Permanent
from firesafe.otel import OpenTelemetry


@pytest.fixture
def traced() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def app(store_url: str, traced: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[App]:
    a = App(store_url, clock=FakeClock(), hooks=[OpenTelemetry(traced[0])])
    yield a
    a.close()


def declare(app: App, provider: TracerProvider) -> tuple[Any, Any]:
    inner = provider.get_tracer("the job")

    @app.job
    def charge(ctx: Any, order: str) -> str:
        with inner.start_as_current_span(f"call the bank for {order}"):
            return f"charged {order}"

    @app.job
    def broken(ctx: Any, order: str) -> None:
        raise Permanent(f"card declined for {order}")

    return charge, broken


def attempts(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {s.attributes["firesafe.job.key"]: s for s in exporter.get_finished_spans()
            if s.name.startswith("firesafe.attempt ")}


def test_each_attempt_is_a_span_linked_to_the_enqueue(app: App, traced: tuple[TracerProvider, InMemorySpanExporter]
                                                       ) -> None:
    provider, exporter = traced
    charge, broken = declare(app, provider)
    with provider.get_tracer("the web app").start_as_current_span("POST /orders") as request:
        charge.enqueue("o-1", key="charge:o-1")
        broken.enqueue_many([{"args": ["o-2"], "key": "broken:o-2"}])
    charge.enqueue("o-3", key="charge:o-3")  # no span around it: nothing to link to

    worker = app.worker(burst=True, concurrency=2)
    assert worker.run().succeeded == 2

    spans = attempts(exporter)
    assert set(spans) == {"charge:o-1", "broken:o-2", "charge:o-3"}
    ok, bad, alone = spans["charge:o-1"], spans["broken:o-2"], spans["charge:o-3"]
    assert ok.name == "firesafe.attempt charge" and ok.kind == SpanKind.CONSUMER
    assert {k: ok.attributes[k] for k in ("firesafe.job.name", "firesafe.job.key", "firesafe.job.queue",
                                          "firesafe.attempt", "firesafe.outcome", "firesafe.state",
                                          "firesafe.worker")} == {
        "firesafe.job.name": "charge", "firesafe.job.key": "charge:o-1", "firesafe.job.queue": "default",
        "firesafe.attempt": 1, "firesafe.outcome": "succeeded", "firesafe.state": "succeeded",
        "firesafe.worker": worker.id}
    assert ok.status.status_code == StatusCode.OK and "error.type" not in ok.attributes
    assert bad.status.status_code == StatusCode.ERROR
    assert bad.status.description.startswith("Permanent: card declined for o-2")
    assert (bad.attributes["error.type"], bad.attributes["firesafe.outcome"], bad.attributes["firesafe.state"],
            bad.attributes["firesafe.reason"]) == ("Permanent", "failed", "dead", "permanent")
    # the link to the enqueuing span (another trace: a job may run much later, each attempt on its own)
    enqueued = request.get_span_context()
    for span in (ok, bad):
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (enqueued.trace_id, enqueued.span_id)
        assert span.context.trace_id != enqueued.trace_id and span.parent is None
    assert alone.links == () or not alone.links
    # a span the job makes is a child of its attempt's span
    [bank] = [s for s in exporter.get_finished_spans() if s.name == "call the bank for o-1"]
    assert bank.parent is not None and bank.parent.span_id == ok.context.span_id
    assert ok.end_time >= ok.start_time


def test_as_child_the_attempt_joins_the_enqueuing_trace(store_url: str,
                                                         traced: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = traced
    app = App(store_url, clock=FakeClock(), hooks=[OpenTelemetry(provider, as_child=True)])
    try:
        charge, _ = declare(app, provider)
        with provider.get_tracer("the web app").start_as_current_span("POST /orders") as request:
            charge.enqueue("o-1", key="charge:o-1")
        app.worker(burst=True).run()
    finally:
        app.close()
    span = attempts(exporter)["charge:o-1"]
    assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    assert span.context.trace_id == request.get_span_context().trace_id and not span.links


def test_a_retried_job_has_a_span_per_attempt(store_url: str,
                                              traced: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = traced
    calls: list[int] = []
    app = App(store_url, hooks=[OpenTelemetry(provider)])  # the process clock: the retry comes due

    @app.job(max_attempts=3, backoff=Backoff(base=0.05, cap=0.05))
    def flaky(ctx: Any) -> str:
        calls.append(ctx.job.attempt)
        if ctx.job.attempt == 1:
            raise ConnectionError("the bank did not answer")
        return "ok"

    with provider.get_tracer("the web app").start_as_current_span("POST /orders"):
        flaky.enqueue(key="flaky")
    try:
        app.worker(burst=True, wait_scheduled=True, poll_interval=0.05).run()
    finally:
        app.close()
    assert calls == [1, 2]
    spans = [s for s in exporter.get_finished_spans() if s.name == "firesafe.attempt flaky"]
    by_attempt = {s.attributes["firesafe.attempt"]: s for s in spans}
    assert set(by_attempt) == {1, 2}
    first, second = by_attempt[1], by_attempt[2]
    assert (first.attributes["firesafe.outcome"], first.attributes["firesafe.state"],
            first.attributes["error.type"]) == ("failed", "scheduled", "ConnectionError")
    assert first.status.status_code == StatusCode.ERROR and "firesafe.retry_in" in first.attributes
    assert second.attributes["firesafe.outcome"] == "succeeded" and second.status.status_code == StatusCode.OK
    assert first.links[0].context.span_id == second.links[0].context.span_id  # both link to the one enqueue
