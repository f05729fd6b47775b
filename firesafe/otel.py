"""OpenTelemetry spans for firesafe: one span per attempt, linked to the span that enqueued the job.

Install the extra (``pip install 'firesafe[otel]'``), set up a tracer provider as usual, and
register the hook::

    from firesafe import App
    from firesafe.otel import OpenTelemetry

    app = App("sqlite:///jobs.db", hooks=[OpenTelemetry()])

- **The enqueue.** A job enqueued while a span is current records that span's W3C ``traceparent``
  with the job (in the store, so it reaches a worker in another process or on another host).
- **Each attempt** is a span named ``firesafe.attempt <job name>`` (kind ``CONSUMER``) with the
  attributes ``firesafe.job.name``, ``firesafe.job.key``, ``firesafe.job.queue``,
  ``firesafe.attempt``, ``firesafe.run``, ``firesafe.worker``, and once the outcome is committed
  ``firesafe.outcome``, ``firesafe.state``, ``firesafe.reason`` and ``error.type``. A failed or
  timed-out attempt has the status ``ERROR`` (its description: the error's type and message as
  the trace keeps them, masked). The span *links* to the enqueuing span (a job may run hours later,
  and each retry is a span of its own); ``OpenTelemetry(as_child=True)`` makes it a child instead.
- **Spans your job makes** are children of its attempt's span: the hook makes the attempt's span
  current on the thread that runs the job.

The span starts when the attempt starts and ends at the end of the job's function (its duration);
it is exported once the outcome is committed. An attempt whose outcome this worker could not record
(the worker stopped or died first) ends when the worker stops, without an outcome; the attempt
itself is rescued by the store's rules as usual.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from firesafe.hooks import AttemptEnded, AttemptStarted, Hook

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("firesafe.otel needs OpenTelemetry: pip install 'firesafe[otel]'") from exc

if TYPE_CHECKING:
    from firesafe.worker import Worker

__all__ = ["OpenTelemetry"]

_PROPAGATOR = TraceContextTextMapPropagator()
#: The longest status description of a failed attempt's span (the message is cut after this).
MAX_DESCRIPTION = 256


class OpenTelemetry(Hook):
    """A :class:`firesafe.Hook` making a span per attempt, linked to the enqueue (see the module's
    docstring). ``tracer_provider``: the provider to use (default: the global one)."""

    def __init__(self, tracer_provider: Any = None, *, as_child: bool = False) -> None:
        from firesafe.version import __version__

        self._tracer = trace.get_tracer("firesafe", __version__, tracer_provider=tracer_provider)
        self.as_child = as_child
        self._lock = threading.Lock()
        self._spans: dict[tuple[str, int, int], tuple[Any, int]] = {}  # (worker, job id, run) -> (span, start ns)
        self._local = threading.local()  # per thread: the token of the attempt's context made current there

    # -- the enqueue -------------------------------------------------------------------------
    def job_context(self) -> str | None:
        """The current span's W3C ``traceparent``, or None when no span is recording."""
        if not trace.get_current_span().get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    # -- the attempt -------------------------------------------------------------------------
    def attempt_started(self, attempt: AttemptStarted) -> None:
        # The context made current on this thread for its last attempt is let go first: the attempt's
        # span is a root (or the enqueue's child), never the child of whatever ran here before.
        self._let_go()
        enqueued = _span_context(attempt.context)
        parent = otel_context.Context()
        links = []
        if enqueued is not None:
            if self.as_child:
                parent = trace.set_span_in_context(trace.NonRecordingSpan(enqueued))
            else:
                links.append(Link(enqueued, {"firesafe.link": "enqueue"}))
        start = time.time_ns()
        span = self._tracer.start_span(
            f"firesafe.attempt {attempt.name}", context=parent, kind=SpanKind.CONSUMER, links=links,
            start_time=start, attributes={
                "firesafe.job.name": attempt.name, "firesafe.job.key": attempt.key,
                "firesafe.job.queue": attempt.queue, "firesafe.attempt": attempt.attempt,
                "firesafe.max_attempts": attempt.max_attempts, "firesafe.run": attempt.run,
                "firesafe.worker": attempt.worker, "messaging.system": "firesafe",
                "messaging.destination.name": attempt.queue, "messaging.operation": "process",
            })
        with self._lock:
            self._spans[(attempt.worker, attempt.job_id, attempt.run)] = (span, start)
        # The job runs next on this thread: the spans it makes are children of this one.
        self._local.token = otel_context.attach(trace.set_span_in_context(span))

    def attempt_ended(self, attempt: AttemptEnded) -> None:
        with self._lock:
            found = self._spans.pop((attempt.worker, attempt.job_id, attempt.run), None)
        if found is None:  # it never started here (cancelled while it waited for a thread): a span of no length
            now = time.time_ns()
            span = self._tracer.start_span(
                f"firesafe.attempt {attempt.name}", context=otel_context.Context(), kind=SpanKind.CONSUMER,
                start_time=now,
                attributes={"firesafe.job.name": attempt.name, "firesafe.job.key": attempt.key,
                            "firesafe.job.queue": attempt.queue, "firesafe.attempt": attempt.attempt,
                            "firesafe.run": attempt.run, "firesafe.worker": attempt.worker})
            found = (span, now)
        span, start = found
        span.set_attribute("firesafe.outcome", attempt.outcome)
        span.set_attribute("firesafe.state", attempt.state)
        if attempt.reason:
            span.set_attribute("firesafe.reason", attempt.reason)
        if attempt.error_type:
            span.set_attribute("error.type", attempt.error_type)
        if attempt.retry_in is not None:
            span.set_attribute("firesafe.retry_in", attempt.retry_in)
        if attempt.failed:
            text = f"{attempt.error_type or 'Error'}: {attempt.message or ''}"
            span.set_status(Status(StatusCode.ERROR, text[:MAX_DESCRIPTION]))
        elif attempt.outcome == "succeeded":
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=start + int(attempt.duration * 1e9) if attempt.duration else None)

    # -- the worker --------------------------------------------------------------------------
    def worker_stopped(self, worker: Worker) -> None:
        """End the spans of this worker's attempts whose outcome it did not record."""
        with self._lock:
            left = [k for k in self._spans if k[0] == worker.id]
            spans = [self._spans.pop(k)[0] for k in left]
        for span in spans:
            span.add_event("firesafe.worker_stopped", {"firesafe.worker": worker.id})
            span.end()

    def _let_go(self) -> None:
        token = getattr(self._local, "token", None)
        if token is not None:
            self._local.token = None
            otel_context.detach(token)


def _span_context(traceparent: str | None) -> Any:
    """The span context a stored ``traceparent`` names, or None (none stored, or not valid)."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None
