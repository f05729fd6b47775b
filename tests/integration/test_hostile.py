"""A plain `firesafe worker` process (no supervisor) among hostile jobs (invariant 11): exceptions
whose text holds lone surrogates or NUL, whose ``__str__`` raises, whose chain loops, whose message
is 5 MB; arguments nested ~985 levels deep written into the store by hand; a hypothesis-generated
corpus of hostile text raised as messages; deep and wide JSON. The process stays up, runs every
other job, ends each poison job with its trace, and exits 0 on SIGTERM. On SQLite and PostgreSQL."""

from __future__ import annotations

import importlib.util
import json
import random
import signal
from pathlib import Path
from typing import Any

import hypothesis
import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, given, settings

from firesafe import App, InvalidInput, State
from firesafe.idempotency.keys import MAX_DEPTH
from firesafe.sanitize import for_store
from firesafe.worker.executor import MAX_TRACEBACK, error_fields
from tests.cli.conftest import run_cli, start_cli, wait_for
from tests.contract.test_hostile_data import nested, set_column

APP = '''
import json
from pathlib import Path

from firesafe import App, Backoff

HERE = Path({here!r})
app = App({url!r})
SURROGATE = b"\\xe9".decode("utf-8", "surrogateescape")


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


def make(kind):
    if kind == "surrogate":
        return ValueError("caf" + SURROGATE)
    if kind == "nul":
        return ValueError("acme\\x00corp")
    if kind == "str_raises":
        return StrRaises("x")
    if kind == "cycle":
        a, b = ValueError("first"), KeyError("second")
        a.__cause__, b.__context__ = b, a
        return a
    if kind == "huge":
        return ValueError("x" * 5_000_000)
    raise AssertionError(kind)


@app.job(max_attempts=2, backoff=Backoff(base=0.05, cap=0.05, jitter="none"))
def poison(ctx, kind: str) -> None:
    raise make(kind)


@app.job
def fine(ctx, i: int) -> int:
    return i


@app.job
def echo(ctx, value=None):
    return value


@app.job(max_attempts=1)
def shout(ctx, i: int) -> None:
    codes = json.loads((HERE / "corpus.json").read_text())[i]
    raise ValueError("".join(map(chr, codes)))
'''

#: The poison kinds of the app above, and the message each one's trace keeps.
POISONS = {"surrogate": "caf\\udce9", "nul": "acme\\x00corp", "str_raises": "StrRaises('x')",
           "cycle": "first", "huge": "x" * 2000}


def app_module(folder: Path, url: str) -> str:
    name = "hostile_app"
    (folder / f"{name}.py").write_text(APP.format(here=str(folder), url=url))
    return f"{name}:app"


def load(folder: Path) -> Any:
    """The app module, imported in this process too (to enqueue and inspect)."""
    spec = importlib.util.spec_from_file_location(f"hostile_{random.randrange(10**9)}", folder / "hostile_app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stored_text(text: str | None) -> str:
    assert text is not None
    text.encode()  # valid UTF-8
    assert "\x00" not in text
    return text


def test_one_plain_worker_runs_everything_beside_every_kind_of_poison(store_url: str, tmp_path: Path) -> None:
    target = app_module(tmp_path, store_url)
    module = load(tmp_path)
    app: App = module.app
    try:
        # Given 200 ordinary jobs and, among them, one poison job of each kind
        module.fine.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(100)])
        for kind in POISONS:
            module.poison.enqueue(kind, key=f"poison:{kind}")
        module.echo.enqueue("placeholder", key="deep")  # its arguments are made ~985 levels deep below
        module.fine.enqueue_many([{"args": [i], "key": f"fine:{i}"} for i in range(100, 200)])
        set_column(app, "deep", "payload", '{"args":[' + "[" * 985 + "]" * 985 + '],"kwargs":{}}')
        poisons = [f"poison:{kind}" for kind in POISONS] + ["deep"]

        # When one plain worker process runs them
        log = tmp_path / "worker.log"
        proc = start_cli(["worker", target, "--concurrency", "4"], tmp_path, log)
        try:
            def done() -> bool:
                jobs = {j.key: j for j in app.jobs_list(limit=1000)}
                return (sum(j.state == State.SUCCEEDED for k, j in jobs.items() if k.startswith("fine:")) == 200
                        and all(jobs[k].state == State.DEAD for k in poisons))

            wait_for(done, timeout=60, what="every job to end")
            assert proc.poll() is None, log.read_text()  # it stayed up throughout
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
        text = log.read_text(errors="replace")
        assert "store fault" not in text and "crashed" not in text and "Traceback" not in text

        # Then each poison job ended dead after its two attempts, each with its error and traceback
        for kind, message in POISONS.items():
            job = app.get(f"poison:{kind}")
            assert job.state == State.DEAD and job.reason == "exhausted", kind
            assert job.error_message == message and [a.outcome for a in job.trace] == ["failed", "failed"]
            for attempt in job.trace:
                assert stored_text(attempt.message) == message
                assert len(stored_text(attempt.traceback)) <= MAX_TRACEBACK + 20
            if kind != "huge":  # a 5 MB message leaves only its own end in the last 8,000 characters
                assert "Traceback (most recent call last)" in (job.trace[0].traceback or "")
        # The arguments nested past the cap: dead, never run, saying why (past the cap, or past what the
        # decoder reads on the worker's stack: whichever it met first)
        deep = app.get("deep")
        assert deep.state == State.DEAD and deep.reason == "undecodable_payload" and len(deep.trace) == 1
        why = stored_text(deep.error_message)
        assert "nested more than 256 levels deep" in why or "RecursionError: maximum recursion depth" in why
        # And the CLI reads each of them back
        for key in poisons:
            shown = run_cli(["show", key, "--json", "--store", store_url], tmp_path)
            assert shown.returncode == 0, shown.stderr
            record = json.loads(shown.stdout)
            assert record["state"] == "dead" and record["trace"][-1]["message"]
    finally:
        app.close()


SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
HOSTILE = st.sampled_from(["\x00", "\x1b", "\x1b]0;title\x07", "\x07", "\x7f", "\x85", "\x9b", "\r", "\n", "\t",
                           "\u202e", "\u2066", "\u2069", "\u2028", "\ufeff", "\\", "\\x00", "[bold]", "é", "😀"])
#: Text made of hostile pieces: NUL, lone surrogates, control and bidi characters, ordinary text.
HOSTILE_TEXT = st.lists(st.one_of(HOSTILE, SURROGATES, st.text(max_size=8)), min_size=1, max_size=40).map("".join)
#: Any JSON value: what enqueue takes and a job may return.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=40)


def drawn(strategy: st.SearchStrategy[Any], n: int, seed: int) -> list[Any]:
    """``n`` values of ``strategy`` (fewer if it has fewer), the same ones for the same seed."""
    values: list[Any] = []

    @hypothesis.seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(value: Any) -> None:
        values.append(value)

    draw()
    return values


def test_a_hypothesis_corpus_of_hostile_text_and_json_through_a_real_worker(store_url: str, tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    print(f"corpus seed: {seed} (hypothesis.seed)")  # shown with a failure, to replay it
    texts = [*drawn(HOSTILE_TEXT, 80, seed), "x\x00" * 3000, "\udce9" * 3000]
    values = [*drawn(JSON, 60, seed), nested(MAX_DEPTH), {f"k{i}": [i, {"v": [i] * 5}] for i in range(3000)}]
    # As code points: JSON would join two lone surrogates that happen to make a pair into one character
    (tmp_path / "corpus.json").write_text(json.dumps([[ord(c) for c in text] for text in texts]))
    target = app_module(tmp_path, store_url)
    module = load(tmp_path)
    app: App = module.app
    try:
        module.shout.enqueue_many([{"args": [i], "key": f"shout:{i}"} for i in range(len(texts))])
        module.echo.enqueue_many([{"args": [v], "key": f"echo:{i}"} for i, v in enumerate(values)])
        try:
            module.echo.enqueue(nested(MAX_DEPTH + 1), key="too-deep")
        except InvalidInput as exc:
            assert f"nested more than {MAX_DEPTH} levels deep" in str(exc)
        else:
            raise AssertionError("arguments nested past the cap were taken")

        proc = run_cli(["worker", target, "--burst", "--concurrency", "4"], tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]

        jobs = {j.key: j for j in app.jobs_list(limit=1000)}
        assert len(jobs) == len(texts) + len(values)
        for i, text in enumerate(texts):
            job = app.get(f"shout:{i}")
            assert job.state == State.DEAD, (i, text)
            expected = for_store(error_fields(ValueError(text))[1] or "")
            assert stored_text(job.error_message) == expected, (i, text)
            assert stored_text(job.trace[0].traceback).endswith("\n"), (i, text)
        for i, value in enumerate(values):
            job = jobs[f"echo:{i}"]
            assert job.state == State.SUCCEEDED and job.result == value, i
    finally:
        app.close()
