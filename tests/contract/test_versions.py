"""Contract: deploys that change running work (issue 31). Version markers (``ctx.patched``) and the
``on_divergence`` policy, each a run recorded under one version of a job and resumed under another.
Runs on every store."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from firesafe import App, Backoff, ConfigError, State
from firesafe.store.base import ClaimParams

FAST = Backoff(base=1.0, jitter="none")


def first_version(app: App, ran: list[str], fail_after: int, steps: tuple[str, ...] = ("a", "b", "c", "d"),
                  **options: object) -> None:
    """Version 1 of job ``flow``: the steps in order; its first attempt fails after ``fail_after``.
    ``options`` go to ``app.job``."""

    @app.job(name="flow", max_attempts=3, backoff=FAST, **options)
    def flow(ctx) -> list:
        out = []
        for n, name in enumerate(steps):
            if n == fail_after and ctx.job.attempt == 1:
                raise ConnectionError("the deploy came")
            out.append(ctx.step(name, lambda name=name: ran.append(name) or name))
        return out


def recorded_under_version_1(versions: Callable[[], App], ran: list[str], fail_after: int) -> App:
    """Run ``flow`` (key "f") under version 1 until its first attempt fails after ``fail_after``
    steps; the app of version 2, for the deploy."""
    v1 = versions()
    first_version(v1, ran, fail_after=fail_after)
    v1.jobs["flow"].enqueue(key="f")
    v1.work(burst=True)
    return versions()


def test_a_new_run_takes_the_new_path_and_keeps_it_on_retry(app: App, clock) -> None:
    ran: list[str] = []

    @app.job(max_attempts=3, backoff=FAST)
    def flow(ctx) -> list:
        out = [ctx.step("a", lambda: ran.append("a") or "a")]
        if ctx.patched("v2"):
            out.append(ctx.step("b2", lambda: ran.append("b2") or "b2"))
        else:
            out.append(ctx.step("b", lambda: ran.append("b") or "b"))
        assert ctx.patched("v2") is (out[-1] == "b2")  # asked twice in a run: one answer, one place
        if ctx.job.attempt == 1:
            raise ConnectionError("boom")
        return [*out, ctx.step("c", lambda: ran.append("c") or "c")]

    flow.enqueue(key="f")
    app.work(burst=True)
    clock.advance(10)
    app.work(burst=True)
    job = app.get("f")
    assert job.state == State.SUCCEEDED and job.result == ["a", "b2", "c"]
    assert ran == ["a", "b2", "c"]
    assert [s["name"] for s in app.steps("f")] == ["a", "patch:v2", "b2", "c"]
    assert job.trace[1].detail["steps"] == [{"name": "a", "status": "restored"},
                                            {"name": "patch:v2", "status": "restored"},
                                            {"name": "b2", "status": "restored"}, {"name": "c", "status": "ran"}]


def test_a_run_recorded_past_the_change_keeps_the_old_path(versions, clock) -> None:
    ran: list[str] = []
    v2 = recorded_under_version_1(versions, ran, fail_after=3)  # a, b, c recorded

    @v2.job(name="flow", max_attempts=3, backoff=FAST)
    def flow(ctx) -> list:
        out = [ctx.step("a", lambda: ran.append("a") or "a")]
        if ctx.patched("v2-b"):
            out.append(ctx.step("b-new", lambda: ran.append("b-new") or "b-new"))
        else:
            out.append(ctx.step("b", lambda: ran.append("b") or "b"))
        return out + [ctx.step(n, lambda n=n: ran.append(n) or n) for n in ("c", "d")]

    clock.advance(10)
    v2.work(burst=True)
    job = v2.get("f")
    assert job.state == State.SUCCEEDED and job.result == ["a", "b", "c", "d"]
    assert ran == ["a", "b", "c", "d"]  # a, b, c once each, under version 1; d under version 2
    assert [s["name"] for s in v2.steps("f")] == ["a", "b", "c", "d"]  # the old path records no marker
    assert {"name": "patch:v2-b", "status": "old-path"} in job.trace[-1].detail["steps"]
    # A new run under version 2 takes the new path
    flow.enqueue(key="new")
    v2.work(burst=True)
    assert v2.get("new").result == ["a", "b-new", "c", "d"]


def test_a_run_that_had_not_reached_the_change_takes_the_new_path(versions, clock) -> None:
    ran: list[str] = []
    v2 = recorded_under_version_1(versions, ran, fail_after=2)  # a, b recorded

    @v2.job(name="flow", max_attempts=3, backoff=FAST)
    async def flow(ctx) -> list:  # async code asks without await
        out = [await ctx.step(n, lambda n=n: ran.append(n) or n) for n in ("a", "b")]
        if ctx.patched("v2-c"):
            out.append(await ctx.step("c-new", lambda: ran.append("c-new") or "c-new"))
        else:
            out.append(await ctx.step("c", lambda: ran.append("c") or "c"))
        return out

    clock.advance(10)
    v2.work(burst=True)
    assert v2.get("f").result == ["a", "b", "c-new"]
    assert ran == ["a", "b", "c-new"]
    assert [s["name"] for s in v2.steps("f")] == ["a", "b", "patch:v2-c", "c-new"]


def test_removing_a_marker_later_keeps_the_runs_recorded_with_it(versions, clock) -> None:
    ran: list[str] = []
    v2 = versions()

    @v2.job(name="flow", max_attempts=3, backoff=FAST)
    def flow_v2(ctx) -> list:
        out = [ctx.step("a", lambda: ran.append("a") or "a")]
        if ctx.patched("v2"):
            out.append(ctx.step("b-new", lambda: ran.append("b-new") or "b-new"))
        if ctx.job.attempt == 1:
            raise ConnectionError("the next deploy came")
        return [*out, ctx.step("c", lambda: ran.append("c") or "c")]

    flow_v2.enqueue(key="f")
    v2.work(burst=True)
    v3 = versions()

    @v3.job(name="flow", max_attempts=3, backoff=FAST)
    def flow_v3(ctx) -> list:  # the old path is gone, and its marker with it
        out = [ctx.step("a", lambda: ran.append("a") or "a")]
        out.append(ctx.step("b-new", lambda: ran.append("b-new") or "b-new"))
        return [*out, ctx.step("c", lambda: ran.append("c") or "c")]

    clock.advance(10)
    v3.work(burst=True)
    job = v3.get("f")
    assert job.state == State.SUCCEEDED and job.result == ["a", "b-new", "c"]
    assert ran == ["a", "b-new", "c"]


def test_default_policy_a_changed_step_sends_the_run_to_the_dead_letters(versions, clock) -> None:
    ran: list[str] = []
    v2 = recorded_under_version_1(versions, ran, fail_after=3)
    first_version(v2, ran, fail_after=-1, steps=("a", "audit", "b", "c", "d"))
    clock.advance(10)
    v2.work(burst=True)
    job = v2.get("f")
    assert job.state == State.DEAD and job.error_type == "NonDeterminism"
    assert "step 2 is 'audit' in this run but 'b' in the recorded run" in job.error_message
    assert "on_divergence='rerun'" in job.error_message
    assert [s["name"] for s in v2.steps("f")] == ["a", "b", "c"]  # nothing forgotten
    assert not [e for e in job.events if e.kind == "divergence"]


def test_rerun_policy_forgets_from_the_first_difference_and_runs_the_new_code(versions, clock) -> None:
    ran: list[str] = []
    v2 = recorded_under_version_1(versions, ran, fail_after=3)  # a, b, c recorded
    first_version(v2, ran, fail_after=-1, steps=("a", "audit", "b", "c", "d"), on_divergence="rerun")

    clock.advance(10)
    v2.work(burst=True)
    job = v2.get("f")
    assert job.state == State.SUCCEEDED and job.result == ["a", "audit", "b", "c", "d"]
    # a restored; from the difference on the new code ran: b and c a second time
    assert ran == ["a", "b", "c", "audit", "b", "c", "d"]
    assert [s["name"] for s in v2.steps("f")] == ["a", "audit", "b", "c", "d"]
    [event] = [e for e in job.events if e.kind == "divergence"]
    assert event.actor == "worker"
    assert event.detail == {"message": "step 2 is 'audit' in this run but 'b' in the recorded run", "step": "audit",
                            "position": 2, "recorded": "b", "from_position": 2, "forgotten": ["b", "c"]}
    assert job.trace[-1].detail["steps"][0] == {"name": "a", "status": "restored"}


def test_rerun_policy_when_a_recorded_step_moved_earlier(versions, clock) -> None:
    ran: list[str] = []
    v2 = recorded_under_version_1(versions, ran, fail_after=3)  # a, b, c recorded
    first_version(v2, ran, fail_after=-1, steps=("a", "c", "b"), on_divergence="rerun")

    clock.advance(10)
    v2.work(burst=True)
    job = v2.get("f")
    assert job.state == State.SUCCEEDED and ran == ["a", "b", "c", "c", "b"]
    [event] = [e for e in job.events if e.kind == "divergence"]
    assert event.detail["forgotten"] == ["b", "c"] and event.detail["from_position"] == 2


def test_step_forget_from_is_fenced_on_the_lease_and_records_its_event(app: App) -> None:
    @app.job
    def j(ctx) -> None: ...

    j.enqueue(key="k")
    store = app.store
    [c] = store.job_claim(ClaimParams(("default",), 1, "w", 30.0))
    for n, name in enumerate(("a", "b", "c")):
        assert store.step_record(c.job.id, c.token, name, n, "1")
    assert store.step_forget_from(c.job.id, "stale-token", 1, {"why": "test"}) is None
    assert [s.name for s in store.step_list(c.job.id)] == ["a", "b", "c"]
    assert store.step_forget_from(c.job.id, c.token, 1, {"why": "test"}) == 2
    assert [s.name for s in store.step_list(c.job.id)] == ["a"]
    events = app.get("k").events
    assert [(e.kind, e.actor, e.detail) for e in events] == [("divergence", "worker", {"why": "test"})]


def test_a_step_may_not_take_a_markers_name(app: App) -> None:
    @app.job(max_attempts=1)
    def j(ctx) -> None:
        ctx.step("patch:v2", lambda: 1)

    j.enqueue(key="k")
    app.work(burst=True)
    job = app.get("k")
    assert job.state == State.DEAD and job.error_type == "InvalidInput"
    assert "reserved for ctx.patched" in job.error_message


def test_a_bad_change_id_or_policy_is_one_clear_line(app: App) -> None:
    bad = {"empty": "", "nul": "v2\x00", "surrogate": "v2\ud800", "huge": "v" * 100_000, "number": 2}
    asked: list[str] = []

    @app.job(max_attempts=1)
    def j(ctx, which: str) -> None:
        asked.append(which)
        ctx.patched(bad[which])

    for which in bad:
        j.enqueue(which, key=which)
    j.enqueue("empty", key="twin")  # fails only itself, as its neighbours do
    app.work(burst=True)
    messages = {k: app.get(k).error_message for k in [*bad, "twin"]}
    assert sorted(asked) == sorted([*bad, "empty"])
    assert all(app.get(k).state == State.DEAD and app.get(k).error_type == "InvalidInput" for k in messages)
    assert messages["empty"] == "a change id must be 1 to 194 printable characters, not ''"
    assert messages["nul"].endswith("not 'v2\\x00'") and messages["surrogate"].endswith("not 'v2\\ud800'")
    assert messages["huge"].endswith("vvv...") and len(messages["huge"]) < 200
    assert messages["number"].endswith("not an int")
    with pytest.raises(ConfigError, match=r"^job 'x': on_divergence must be one of 'dead', 'rerun', not 'retry'$"):
        app.job(name="x", on_divergence="retry")(lambda ctx: None)
