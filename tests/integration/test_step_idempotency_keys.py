"""``ctx.idempotency_key``: two jobs whose keys and step names join into the same text still hand the
provider two different keys, so neither effect is dropped as the other's duplicate. Runs on every store."""

from __future__ import annotations

from firesafe import App, State
from firesafe.context import Context, JobInfo


def _ctx(job_key: str) -> Context:
    return Context(JobInfo(key=job_key, name="pay", queue="default", attempt=1, max_attempts=1, run=1, id=1))


def test_ctx_idempotency_key_differs_for_job_a_step_b_c_and_job_a_b_step_c() -> None:
    assert _ctx("a").idempotency_key("b/c") == "a/b%2Fc"
    assert _ctx("a/b").idempotency_key("c") == "a/b/c"
    assert _ctx("refund:o-1").idempotency_key("charge") == "refund:o-1/charge"  # unchanged format


def test_a_provider_deduplicating_by_ctx_idempotency_key_applies_both_jobs_effects(app: App) -> None:
    # Given a provider that applies each effect once per idempotency key
    applied: dict[str, str] = {}

    @app.job
    def pay(ctx, step: str) -> None:
        applied.setdefault(ctx.idempotency_key(step), ctx.job.key)

    # When job "a" runs step "b/c" and job "a/b" runs step "c" (both "a/b/c" when simply joined)
    pay.enqueue("b/c", key="a")
    pay.enqueue("c", key="a/b")
    app.work(burst=True)
    # Then the provider applied both jobs' effects
    assert app.get("a").state == app.get("a/b").state == State.SUCCEEDED
    assert sorted(applied.values()) == ["a", "a/b"]
