"""Contract: schedules and backfill. Every window runs once, missed windows are caught up by policy and
recorded, a restart enqueues nothing new, ranges are backfilled on purpose. Runs on every store."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

import pytest

from firesafe import App, FakeClock, InvalidInput, Permanent, State
from firesafe.schedules.scheduler import Scheduler
from firesafe.schedules.windows import Window
from firesafe.store.base import JobFilter

#: 2026-11-30 12:02:30 UTC: two and a half minutes into a 5-minute window.
T0 = datetime(2026, 11, 30, 12, 2, 30, tzinfo=UTC).timestamp()


def five_minutes(app: App, catchup: str = "all", **options) -> list[Window]:
    seen: list[Window] = []

    @app.schedule("*/5 * * * *", catchup=catchup, **options)
    def every5(ctx, window: Window) -> str:
        seen.append(window)
        return window.start.isoformat()

    return seen


def count(app: App, name: str = "every5", state: str | None = None) -> int:
    return app.store.job_count(JobFilter(name=name, state=state))


def restart(app: App, clock: FakeClock, declare=five_minutes, **options) -> App:
    """The same store and clock, a new process's App and scheduler."""
    again = App(app.store_url, clock=clock)
    declare(again, **options)
    return again


@pytest.mark.parametrize(("policy", "enqueued", "missed"), [("all", 36, 0), ("latest", 1, 35), ("skip", 0, 36)])
def test_downtime_of_three_hours_is_caught_up_by_policy_and_restarts_enqueue_nothing_new(
        app: App, clock: FakeClock, policy: str, enqueued: int, missed: int) -> None:
    # Given a 5-minute schedule whose scheduler ran at T0
    clock.set(T0)
    five_minutes(app, policy, catchup_window=timedelta(days=1))
    assert Scheduler(app, "w1").run()["every5"].enqueued == 0
    # When the workers were down for 3 hours and one comes back
    clock.advance(3 * 3600)
    again = restart(app, clock, catchup=policy, catchup_window=timedelta(days=1))
    result = Scheduler(again, "w2").run()["every5"]
    # Then the policy decides: all 36 windows, the latest one, or none; the rest are recorded missed
    assert (result.enqueued, result.missed) == (enqueued, missed)
    assert count(app) == enqueued
    assert len(app.store.schedule_missed_list("every5", limit=1000)) == missed
    if policy == "latest":
        assert app.get("every5@2026-11-30T14:55:00+00:00").state == State.QUEUED
    # And a second and a third restart enqueue nothing new (and record nothing new)
    for n in range(2):
        clock.advance(30)
        third = restart(app, clock, catchup=policy, catchup_window=timedelta(days=1))
        assert Scheduler(third, f"w{3 + n}").run()["every5"] == type(result)(0, 0, True)
        third.close()
    assert count(app) == enqueued
    events = app.store.schedule_event_list(name="every5")
    assert [e.kind for e in events] == (["missed"] if missed else [])
    if missed:
        assert events[0].detail["count"] == missed
        if hasattr(app.store, "alert_pending"):  # the alert was written with the missed windows
            alerts = [e for e in app.store.alert_pending(100) if e.kind == "schedule_missed"]
            assert len(alerts) == 1 and alerts[0].job_name == "every5"
    # And the next window is enqueued on time
    clock.set(datetime(2026, 11, 30, 15, 5, 1, tzinfo=UTC).timestamp())
    assert Scheduler(again, "w2").run()["every5"].enqueued == 1
    again.close()


def test_windows_older_than_the_catchup_window_are_missed(app: App, clock: FakeClock) -> None:
    clock.set(T0)
    five_minutes(app, "all", catchup_window=timedelta(hours=1))
    Scheduler(app, "w1").run()
    clock.advance(3 * 3600)
    result = Scheduler(app, "w1").run()["every5"]
    assert (result.enqueued, result.missed) == (12, 24)
    reasons = {m.reason for m in app.store.schedule_missed_list("every5", limit=100)}
    assert reasons == {"outside_catchup_window"}
    assert app.get("every5@2026-11-30T14:05:00+00:00").state == State.QUEUED


def test_each_window_runs_once_with_its_bounds(app: App, clock: FakeClock) -> None:
    clock.set(datetime(2026, 11, 29, 2, 0, tzinfo=UTC).timestamp())  # 03:00 in Berlin
    seen: list[Window] = []

    @app.schedule("0 2 * * *", tz="Europe/Berlin", catchup="all", catchup_window=timedelta(days=7))
    def nightly_sync(ctx, window: Window) -> None:
        seen.append(window)

    scheduler = Scheduler(app, "w1")
    scheduler.run()
    clock.set(datetime(2026, 12, 1, 3, 0, tzinfo=UTC).timestamp())  # 04:00 in Berlin, after two nights
    assert scheduler.run()["nightly_sync"].enqueued == 2
    assert scheduler.run()["nightly_sync"].enqueued == 0
    app.work(burst=True)
    assert [(w.start.isoformat(), w.end.isoformat()) for w in seen] == [
        ("2026-11-29T02:00:00+01:00", "2026-11-30T02:00:00+01:00"),
        ("2026-11-30T02:00:00+01:00", "2026-12-01T02:00:00+01:00")]
    assert seen[1].key == "nightly_sync@2026-11-30T02:00:00+01:00"
    assert app.get("nightly_sync@2026-11-30T02:00:00+01:00").state == State.SUCCEEDED
    assert (seen[1].end - seen[1].start) == timedelta(days=1)


def test_schedulers_racing_on_one_store_enqueue_and_record_each_window_once(
        app: App, clock: FakeClock, store_url: str) -> None:
    clock.set(T0)
    five_minutes(app, "latest")
    Scheduler(app, "w0").run()
    clock.advance(3 * 3600)
    apps = [restart(app, clock, catchup="latest") for _ in range(3)]
    barrier = threading.Barrier(3)
    results: list[object] = []

    def race(a: App, n: int) -> None:
        a.store.now()  # connect before the race
        barrier.wait()
        results.append(Scheduler(a, f"racer-{n}").run()["every5"])

    threads = [threading.Thread(target=race, args=(a, n)) for n, a in enumerate(apps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3
    assert sum(r.enqueued for r in results) == 1  # type: ignore[attr-defined]
    assert sum(r.missed for r in results) == 35  # type: ignore[attr-defined]
    assert count(app) == 1
    assert len(app.store.schedule_event_list(name="every5")) == 1
    for a in apps:
        a.close()


def test_one_scheduler_is_active_and_another_takes_over_within_one_lease(app: App, clock: FakeClock) -> None:
    clock.set(T0)
    five_minutes(app)
    first, second = Scheduler(app, "w1", lease=10), Scheduler(app, "w2", lease=10)
    assert first.tick() is not None
    assert second.tick() is None  # not the leader
    clock.advance(5)
    assert first.tick() is not None and second.tick() is None  # renewed
    # first's worker dies after its last renewal: the second takes over within one lease period
    clock.advance(9)
    assert second.tick() is None
    clock.advance(1.5)
    assert second.tick() is not None and second.leading
    clock.set(datetime(2026, 11, 30, 12, 5, 1, tzinfo=UTC).timestamp())
    assert second.tick()["every5"].enqueued == 1
    assert count(app) == 1
    # a clean stop hands over at once
    second.stop()
    assert first.tick() is not None


def test_pause_and_resume(app: App, clock: FakeClock) -> None:
    clock.set(T0)
    five_minutes(app)
    scheduler = Scheduler(app, "w1")
    scheduler.run()
    app.schedule_pause("every5")
    clock.advance(3600)
    assert scheduler.run()["every5"].enqueued == 0
    [status] = app.schedules_status()
    assert status.paused
    app.schedule_resume("every5")
    assert scheduler.run()["every5"].enqueued == 0  # windows that ended while paused are not run
    clock.advance(300)
    assert scheduler.run()["every5"].enqueued == 1
    [status] = app.schedules_status()
    assert not status.paused and status.last_window is not None
    assert status.next_window is not None and status.next_window.start == status.last_window.end
    with pytest.raises(InvalidInput, match="no schedule named 'nope'"):
        app.schedule_pause("nope")


# -- backfill --------------------------------------------------------------------------------------
def nightly(app: App, fail_days: set[int] | None = None) -> list[Window]:
    seen: list[Window] = []

    @app.schedule("0 2 * * *", tz="Europe/Berlin")
    def nightly_sync(ctx, window: Window) -> None:
        seen.append(window)
        if fail_days and window.start.day in fail_days:
            raise Permanent(f"upstream had no data for {window.start.date()}")

    return seen


def test_backfill_dry_run_lists_without_enqueuing_and_a_repeat_enqueues_nothing_new(
        app: App, clock: FakeClock) -> None:
    clock.set(datetime(2026, 12, 5, tzinfo=UTC).timestamp())
    nightly(app)
    preview = app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 30), dry_run=True)
    assert preview.windows == 30 and preview.enqueued == 30
    assert preview.keys[0] == "nightly_sync@2026-11-01T02:00:00+01:00"
    assert preview.keys[-1] == "nightly_sync@2026-11-30T02:00:00+01:00"
    assert count(app, "nightly_sync") == 0
    assert app.store.schedule_event_list(name="nightly_sync") == []
    done = app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 30))
    assert (done.enqueued, done.keys) == (30, preview.keys)
    again = app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 30))
    assert (again.enqueued, again.rerun_count, again.active) == (0, 0, 30)
    assert count(app, "nightly_sync") == 30
    kinds = [e.kind for e in app.store.schedule_event_list(name="nightly_sync")]
    assert kinds == ["backfill_started", "backfill_finished"] * 2
    if hasattr(app.store, "alert_pending"):
        assert [e.kind for e in app.store.alert_pending(100)] == kinds


def test_backfill_rerun_failed_reruns_only_failed_windows(app: App, clock: FakeClock) -> None:
    clock.set(datetime(2026, 12, 5, tzinfo=UTC).timestamp())
    fail_days = {3, 7}
    seen = nightly(app, fail_days)
    app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 10))
    app.work(burst=True)
    assert count(app, "nightly_sync", "dead") == 2 and count(app, "nightly_sync", "succeeded") == 8
    preview = app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 10), rerun="failed", dry_run=True)
    assert preview.rerun_count == 2 and preview.enqueued == 0 and preview.succeeded == 8
    fail_days.clear()  # upstream fixed
    seen.clear()
    result = app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 10), rerun="failed")
    assert result.rerun_count == 2 and result.succeeded == 8 and result.enqueued == 0
    assert sorted(result.keys) == ["nightly_sync@2026-11-03T02:00:00+01:00", "nightly_sync@2026-11-07T02:00:00+01:00"]
    app.work(burst=True)
    assert sorted(w.start.day for w in seen) == [3, 7]  # only the failed windows ran again
    assert count(app, "nightly_sync", "succeeded") == 10
    # rerun all runs succeeded windows again, on purpose
    seen.clear()
    assert app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 2), rerun="all").rerun_count == 2
    app.work(burst=True)
    assert sorted(w.start.day for w in seen) == [1, 2]


def test_backfill_resolves_missed_windows_and_skips_windows_not_ended(app: App, clock: FakeClock) -> None:
    clock.set(T0)
    five_minutes(app, "skip")
    Scheduler(app, "w1").run()
    clock.advance(3600)
    assert Scheduler(app, "w1").run()["every5"].missed == 12
    assert app.store.schedule_missed_count() == {"every5": 12}
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    result = app.backfill("every5", start, start + timedelta(hours=2))
    # the twelve windows from 12:00 have ended (they are the missed ones); those from 13:00 have not
    assert result.enqueued == 12 and result.not_due == 12
    assert app.store.schedule_missed_count() == {}
    assert all(m.backfilled_at for m in app.store.schedule_missed_list("every5"))


def test_backfill_bad_input(app: App, clock: FakeClock) -> None:
    nightly(app)
    with pytest.raises(InvalidInput, match="is not before"):
        app.backfill("nightly_sync", date(2026, 11, 30), date(2026, 11, 1))
    with pytest.raises(InvalidInput, match="unknown rerun policy"):
        app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 2), rerun="some")
    with pytest.raises(InvalidInput, match="no schedule named"):
        app.backfill("nightly", date(2026, 11, 1), date(2026, 11, 2))
    with pytest.raises(InvalidInput, match="max_active"):
        app.backfill("nightly_sync", date(2026, 11, 1), date(2026, 11, 2), max_active=0)


def test_backfill_max_active_bounds_the_windows_waiting_or_running(app: App, clock: FakeClock) -> None:
    clock.set(datetime(2026, 12, 5, tzinfo=UTC).timestamp())
    most = [0]

    @app.schedule("0 * * * *")
    def hourly(ctx, window: Window) -> None:
        counts = app.store.schedule_job_counts("hourly")
        most[0] = max(most[0], counts.get("queued", 0) + counts.get("scheduled", 0) + counts.get("running", 0))

    worker = app.worker(concurrency=4, poll_interval=0.02)
    thread = threading.Thread(target=worker.run)
    thread.start()
    progress: list[tuple[int, int]] = []
    try:
        result = app.backfill("hourly", datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 1, 12, tzinfo=UTC),
                              max_active=3, progress=lambda d, t: progress.append((d, t)))
    finally:
        deadline = threading.Event()
        for _ in range(500):
            if count(app, "hourly", "succeeded") == 12:
                break
            deadline.wait(0.02)
        worker.stop()
        thread.join(30)
    assert result.enqueued == 12
    assert count(app, "hourly", "succeeded") == 12
    assert 1 <= most[0] <= 3
    assert progress[0] == (0, 12) and progress[-1] == (12, 12)
