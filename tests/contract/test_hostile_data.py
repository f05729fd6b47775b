"""Contract: hostile data fails only its own job (invariant 11). Runs on every store.

Exceptions whose text holds NUL, lone surrogates or control characters, whose ``__str__`` raises,
whose chains loop; results and step results a store cannot hold; arguments nested too deeply; a
stored payload that no longer decodes; an outcome the store refuses for its data. Each ends its own
job with a readable trace, and the jobs beside it run.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from firesafe import App, Backoff, Hook, InvalidInput, Job, State
from firesafe.errors import StoreError
from firesafe.idempotency.keys import MAX_DEPTH
from firesafe.states import Outcome
from firesafe.store.base import ClaimParams, FinishParams, JobFilter
from firesafe.worker import executor
from firesafe.worker.worker import WorkerStats

SURROGATE = b"\xe9".decode("utf-8", "surrogateescape")  # what os.listdir gives for a non-UTF-8 name


def drain(app: App, seconds: float = 15.0, **options: Any) -> WorkerStats:
    """A burst worker that must end by itself: a crash or a wedge fails the test, it does not stall it."""
    worker = app.worker(burst=True, **{"concurrency": 4, **options})
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["stats"] = worker.run()
        except BaseException as exc:  # reported below
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        worker.stop()
        thread.join(seconds)
        raise AssertionError("the worker did not end: wedged on a poison job")
    assert "error" not in box, f"the worker crashed: {box.get('error')!r}"
    return box["stats"]


def nested(depth: int) -> list[Any]:
    """A list ``depth`` levels deep: ``nested(1) == []``."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def storable(text: str | None) -> None:
    """Text as every store holds it: valid UTF-8, no NUL."""
    assert text is not None
    text.encode()
    assert "\x00" not in text


def set_column(app: App, key: str, column: str, value: str) -> None:
    """Write a job's column by hand, as an older version or an operator might have."""
    assert column.isidentifier()
    store: Any = app.store
    if store.dialect == "sqlite":
        conn = sqlite3.connect(store.path)
        with conn:
            conn.execute(f"UPDATE firesafe_jobs SET {column} = ? WHERE key = ?", (value, key))
        conn.close()
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.firesafe_jobs SET {} = %s WHERE key = %s").format(
            sql.Identifier(store.schema), sql.Identifier(column)), (value, key))


# -- error text ------------------------------------------------------------------------------------
class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


class StrNotText(Exception):
    def __str__(self) -> Any:
        return b"bytes, not text"


class NothingPrints(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class NotesRaise(Exception):
    @property
    def __notes__(self) -> Any:
        raise RuntimeError("no notes")


def with_notes() -> Exception:
    exc = ValueError("noted")
    exc.__notes__ = [42, StrRaises(), "note with NUL \x00 and " + SURROGATE]  # type: ignore[attr-defined]
    return exc


def cyclic() -> Exception:
    a, b = ValueError("first"), KeyError("second")
    a.__cause__, b.__context__ = b, a
    return a


def odd_name() -> Exception:
    cls = type("Odd", (Exception,), {"__qualname__": "Odd\x00\x1b" + SURROGATE, "__module__": 5})
    return cls("odd")


#: A poison exception, and the message its trace must keep (masked, escaped, bounded).
ERRORS: dict[str, tuple[Callable[[], BaseException], str]] = {
    "lone surrogate": (lambda: ValueError("caf" + SURROGATE), "caf\\udce9"),
    "NUL": (lambda: ValueError("acme\x00corp"), "acme\\x00corp"),
    "control and bidi characters": (lambda: ValueError("a\x1b]0;owned\x07b\x7f\u202ec\td\ne"),
                                    "a\\x1b]0;owned\\x07b\\x7f\u202ec\td\ne"),
    "__str__ raises": (lambda: StrRaises("x"), "StrRaises('x')"),
    "__str__ returns bytes": (lambda: StrNotText("y"), "StrNotText('y')"),
    "__str__ and __repr__ raise": (lambda: NothingPrints(), "<unprintable NothingPrints>"),
    "notes that are not text": (with_notes, "noted"),
    "__notes__ raises": (lambda: NotesRaise("n"), "n"),
    "cyclic chain": (cyclic, "first"),
    "5 MB message": (lambda: ValueError("x" * 5_000_000), "x" * 2000),
    "odd type name": (odd_name, "odd"),
}


@pytest.mark.parametrize("kind", list(ERRORS))
def test_an_error_of_any_text_is_recorded_escaped_and_the_others_run(app: App, kind: str) -> None:
    make, message = ERRORS[kind]

    @app.job(max_attempts=1)
    def poison(ctx) -> None:
        raise make()

    @app.job
    def fine(ctx, i: int) -> int:
        return i

    poison.enqueue(key="poison")
    fine.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(20)])
    stats = drain(app)
    assert stats.succeeded == 20 and stats.dead == 1
    job = app.get("poison")
    assert job.state == State.DEAD and job.reason == "exhausted"
    assert job.error_message == message
    [attempt] = job.trace
    assert attempt.outcome == "failed" and attempt.message == message
    for text in (job.error_type, job.error_message, attempt.traceback):
        storable(text)
    assert attempt.traceback and len(attempt.traceback) <= 8000 + len("...(cut)...\n")
    assert kind == "5 MB message" or job.error_type in attempt.traceback.replace("\\x00", "\x00")


def test_an_error_keeps_its_trace_and_retries_per_its_policy(app: App, clock) -> None:
    @app.job(max_attempts=2, backoff=Backoff(base=1.0, jitter="none"))
    def flaky(ctx) -> None:
        raise OSError("disk \x00 full " + SURROGATE)

    flaky.enqueue(key="flaky")
    drain(app)
    job = app.get("flaky")
    assert job.state == State.SCHEDULED and job.error_message == "disk \\x00 full \\udce9"
    clock.advance(5)
    drain(app)
    job = app.get("flaky")
    assert job.state == State.DEAD and [a.outcome for a in job.trace] == ["failed", "failed"]
    assert all("OSError: disk \\x00 full \\udce9" in (a.traceback or "") for a in job.trace)


def test_a_secret_argument_quoted_with_hostile_text_is_masked_then_escaped(app: App) -> None:
    @app.job(max_attempts=1)
    def charge(ctx, api_key: str) -> None:
        raise RuntimeError(f"refused {api_key} \x00")

    charge.enqueue("sk-live-123", key="charge")
    drain(app)
    job = app.get("charge")
    assert "sk-live-123" not in (job.error_message or "") and job.error_message.endswith("\\x00")
    assert "sk-live-123" not in (job.trace[0].traceback or "")


# -- results and step results --------------------------------------------------------------------
def test_results_holding_nul_and_control_characters_are_kept_exactly(app: App) -> None:
    value = {"name": "acme\x00corp", "bell\x07": ["\x1b[31m", "\u202e"]}

    @app.job
    def returns(ctx) -> dict:
        return value

    returns.enqueue(key="r")
    drain(app)
    job = app.get("r")
    assert job.state == State.SUCCEEDED and job.result == value


@pytest.mark.parametrize("value", [{"text": "caf" + SURROGATE}, nested(MAX_DEPTH + 1)],
                         ids=["lone surrogate", "too deep"])
def test_a_result_no_store_can_hold_ends_its_job_dead_saying_why(app: App, value: Any) -> None:
    @app.job(max_attempts=3)
    def returns(ctx) -> Any:
        return value

    @app.job
    def fine(ctx) -> str:
        return "ok"

    returns.enqueue(key="r")
    fine.enqueue(key="f")
    drain(app)
    job = app.get("r")
    assert job.state == State.DEAD and job.reason == "permanent" and job.error_type == "UnstorableValue"
    assert "cannot be stored as JSON" in (job.error_message or "")
    assert app.get("f").state == State.SUCCEEDED


def test_step_results_holding_nul_are_kept_and_restored(app: App, clock) -> None:
    @app.job(max_attempts=2, backoff=Backoff(base=1.0, jitter="none"))
    def stepped(ctx) -> Any:
        got = ctx.step("fetch", lambda: {"v": "a\x00b\x1b"})
        if ctx.job.attempt == 1:
            raise OSError("again")
        return got

    stepped.enqueue(key="s")
    drain(app)
    clock.advance(5)
    drain(app)
    job = app.get("s")
    assert job.state == State.SUCCEEDED and job.result == {"v": "a\x00b\x1b"}
    assert job.trace[1].detail["steps"] == [{"name": "fetch", "status": "restored"}]


@pytest.mark.parametrize("value", [{"text": SURROGATE}, nested(MAX_DEPTH + 1)], ids=["lone surrogate", "too deep"])
def test_a_step_result_no_store_can_hold_ends_its_job_dead_saying_why(app: App, value: Any) -> None:
    @app.job(max_attempts=3)
    def stepped(ctx) -> None:
        ctx.step("fetch", lambda: value)

    stepped.enqueue(key="s")
    drain(app)
    job = app.get("s")
    assert job.state == State.DEAD and job.error_type == "UnstorableValue"
    assert "step 'fetch' returned a value that cannot be stored as JSON" in (job.error_message or "")
    assert app.steps("s") == []


# -- payloads --------------------------------------------------------------------------------------
def declare_echo(app: App) -> Any:
    @app.job
    def echo(ctx, value: Any = None, **extra: Any) -> int:
        return len(str(value))

    return echo


def test_arguments_nested_up_to_the_cap_are_taken_and_run(app: App) -> None:
    echo = declare_echo(app)
    echo.enqueue(nested(MAX_DEPTH), key="deep")
    echo.enqueue(value={"k": nested(MAX_DEPTH - 1)}, key="deep-kw")
    wide = {f"k{i}": [i, {"v": [i] * 10}] for i in range(2000)}
    echo.enqueue(wide, key="wide")
    assert drain(app).succeeded == 3
    assert app.get("deep").args == [nested(MAX_DEPTH)] and app.get("wide").args == [wide]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 985, 100_000])
def test_arguments_nested_deeper_than_the_cap_are_refused_and_nothing_is_stored(app: App, depth: int) -> None:
    echo = declare_echo(app)
    deep = nested(depth)
    with pytest.raises(InvalidInput, match=f"nested more than {MAX_DEPTH} levels deep"):
        echo.enqueue(deep, key="deep")
    with pytest.raises(InvalidInput, match=f"nested more than {MAX_DEPTH} levels deep"):
        echo.enqueue(value={"k": deep}, key="deep-kw")
    with pytest.raises(InvalidInput, match=f"nested more than {MAX_DEPTH} levels deep"):
        echo.enqueue_many([{"args": [1], "key": "ok-1"}, {"args": [deep], "key": "deep-many"},
                           {"args": [2], "key": "ok-2"}])
    assert app.store.job_count(JobFilter()) == 0


UNDECODABLE = {
    "not JSON": '{"args": [1, 2',
    "nested past any decoder": "[" * 100_000 + "]" * 100_000,
    "nested past the cap": '{"args":[' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + '],"kwargs":{}}',
    "not an object": "[1, 2, 3]",
}


def test_a_stored_payload_that_does_not_decode_fails_only_its_job(app: App) -> None:
    echo = declare_echo(app)
    for name in UNDECODABLE:
        echo.enqueue(name, key=f"bad:{name}")
    echo.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(20)])
    for name, text in UNDECODABLE.items():
        set_column(app, f"bad:{name}", "payload", text)
    for name in UNDECODABLE:  # the dashboard and the CLI read such rows without failing
        job = app.get(f"bad:{name}")
        assert job.unreadable and job.args == [] and job.as_dict()["unreadable"] == job.unreadable
    assert len(app.jobs_list(limit=100)) == 20 + len(UNDECODABLE)
    stats = drain(app)
    assert stats.succeeded == 20 and stats.dead == len(UNDECODABLE)
    for name in UNDECODABLE:
        job = app.get(f"bad:{name}")
        assert job.state == State.DEAD and job.reason == "undecodable_payload", name
        assert job.error_type == "UndecodablePayload" and "stored arguments cannot be read" in job.error_message
        [attempt] = job.trace
        assert attempt.outcome == "failed" and attempt.message == job.error_message
        assert [j.key for j in app.dlq.list() if j.key == job.key] == [job.key]


def test_a_stored_result_that_does_not_decode_still_reads(app: App) -> None:
    echo = declare_echo(app)
    echo.enqueue("x", key="done")
    drain(app)
    set_column(app, "done", "result", "[" * 100_000 + "]" * 100_000)
    job = app.get("done")
    assert job.state == State.SUCCEEDED and job.result is None and "result" in (job.unreadable or "")


# -- outcomes the store refuses for their data ---------------------------------------------------
def claim(app: App, n: int) -> list[Any]:
    return app.store.job_claim(ClaimParams(("default",), n, "test-worker", 30.0))


def failed(claimed: Any, message: str, traceback: str | None = None) -> FinishParams:
    job = claimed.job
    return FinishParams(job.id, claimed.token, job.runs, State.DEAD, Outcome.FAILED, error_type="Boom",
                        message=message, traceback=traceback, reason="exhausted", detail='{"duration": 0.1}')


def test_an_outcome_refused_for_its_data_is_saved_escaped_and_the_batch_beside_it_as_it_was(app: App) -> None:
    echo = declare_echo(app)
    echo.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(7)])
    claimed = sorted(claim(app, 7), key=lambda c: c.job.key)
    worker = app.worker()
    # Text the executor never sends (it escapes it first), as some other writer might.
    finishes = [failed(c, f"plain é {c.job.key}") for c in claimed]
    finishes[3] = failed(claimed[3], "NUL \x00 and " + SURROGATE, traceback="tb \x00")
    worker.completer.complete(finishes)
    jobs = {j.key: j for j in app.jobs_list(limit=10)}
    assert all(j.state == State.DEAD for j in jobs.values())
    assert [jobs[f"k{i}"].error_message for i in range(7) if i != 3] == [f"plain é k{i}" for i in range(7) if i != 3]
    bad = app.get("k3")
    assert bad.error_message == "NUL \\x00 and \\udce9" and bad.trace[0].traceback == "tb \\x00"
    assert worker.stats.dead == 7 and worker.completer.unsaved == []


@pytest.mark.parametrize("pipeline", [1, 2])
def test_a_refused_outcome_in_the_loop_is_saved_apart_and_the_queue_flows(
        app: App, monkeypatch: pytest.MonkeyPatch, pipeline: int) -> None:
    # Given an executor that forgot to escape an error's text (as a future bug might)
    conclude = executor.conclude

    def careless(*args: Any, **kwargs: Any) -> FinishParams:
        fin = conclude(*args, **kwargs)
        raw = "acme\x00corp " + SURROGATE
        return replace(fin, message=raw, traceback=f"ValueError: {raw}") if fin.error_type else fin

    monkeypatch.setattr(executor, "conclude", careless)

    @app.job(max_attempts=1)
    def poison(ctx) -> None:
        raise ValueError("acme")

    @app.job
    def fine(ctx, i: int) -> int:
        return i

    fine.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(15)])
    poison.enqueue(key="poison")
    fine.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(15, 30)])
    # When a worker saves its outcomes (with the next claim, in the pipeline or not)
    stats = drain(app, pipeline=pipeline)
    # Then the store's refusal is that job's alone: its trace is kept in escaped ASCII, the others run
    assert stats.succeeded == 30 and stats.dead == 1
    job = app.get("poison")
    assert job.state == State.DEAD and job.error_message == "acme\\x00corp \\udce9"
    assert job.trace[0].traceback and "ValueError: acme\\x00corp \\udce9" in job.trace[0].traceback


def test_a_store_fault_is_still_retried_not_taken_for_bad_data(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    echo = declare_echo(app)
    echo.enqueue("x", key="k")
    [claimed] = claim(app, 1)
    worker = app.worker()

    def down(items: Any) -> Any:
        raise StoreError("the store is down")

    monkeypatch.setattr(app.store, "job_finish_many", down)
    with pytest.raises(StoreError, match="down"):
        worker.completer.complete([failed(claimed, "boom")])
    assert len(worker.completer.unsaved) == 1  # kept to save again once the store is back
    monkeypatch.undo()
    worker._flush()
    assert app.get("k").state == State.DEAD and worker.completer.unsaved == []


def test_job_rows_read_back_are_jobs(app: App) -> None:
    echo = declare_echo(app)
    echo.enqueue("x", key="k")
    assert isinstance(app.get("k"), Job) and app.get("k").unreadable is None


def test_a_failing_after_finish_hook_does_not_stop_the_worker(app: App) -> None:
    echo = declare_echo(app)
    echo.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(10)])

    class Broken(Hook):
        def attempt_ended(self, attempt: Any) -> None:
            raise RuntimeError("a hook's bug")

    app.add_hook(Broken())
    assert drain(app).succeeded == 10
    assert {j.state for j in app.jobs_list(limit=20)} == {State.SUCCEEDED}


def test_a_store_fault_saving_an_unrunnable_job_does_not_strand_the_jobs_claimed_with_it(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    echo = declare_echo(app)
    echo.enqueue("x", key="bad")
    echo.enqueue_many([{"args": [i], "key": f"k{i}"} for i in range(5)])
    set_column(app, "bad", "payload", "not json")
    finish_many, faults = app.store.job_finish_many, []

    def once_down(items: Any) -> Any:
        if not faults and any(i.reason == "undecodable_payload" for i in items):
            faults.append(1)
            raise StoreError("the store blinked")
        return finish_many(items)

    monkeypatch.setattr(app.store, "job_finish_many", once_down)
    stats = drain(app, pipeline=1, prefetch=0)
    assert faults and stats.succeeded == 5 and stats.dead == 1
    assert app.get("bad").reason == "undecodable_payload"
