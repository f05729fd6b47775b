"""Fuzzed CLI options and store URLs: every input works, or ends in one clear line (exit 1) or a click
usage error (exit 2); never a traceback, never a partial write. Payloads given to the CLI that are not
JSON (YAML, pickle bytes) are refused before anything is stored.

Store URLs only ever point at this machine: SQLite files under the test's folder, PostgreSQL at
127.0.0.1 (the test server, or closed ports), with query parameters from a fixed list (no ``host=``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firesafe import App, FiresafeError
from firesafe.cli.main import cli
from firesafe.store.base import JobFilter
from firesafe.stores import open_store
from tests.conftest import need_postgres

FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

APP = '''
from firesafe import App

app = App({url!r})


@app.job
def add(ctx, a: int, b: int = 0) -> int:
    return a + b


@app.job(queue="slow")
def anything(ctx, *args, **kwargs) -> None:
    return None
'''

TEXT = st.one_of(st.text(max_size=12), st.sampled_from([
    "", " ", "-", "--", "--json", "'", '"', "%s", "{", "[]", "{}", "null", "1e309", "-1", "0", "99999999999",
    "2024-13-45", "30x", "1h30m", "3d", "nan", "inf", "../../etc/passwd", "\x00", "é", "💥", "dead", "queued",
    "!!python/object/apply:os.system ['true']",
]))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, App]]:
    url = f"sqlite:///{tmp_path}/cli.db"
    module = f"fuzzapp_{os.getpid()}_{abs(hash(tmp_path)) % 10**6}"
    (tmp_path / f"{module}.py").write_text(APP.format(url=url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FIRESAFE_STORE", raising=False)
    app = App(url)
    add = app.job(lambda ctx, a, b=0: a + b, name="add")
    add.enqueue(1, 2, key="k:1")
    add.enqueue_many([{"args": [i], "key": f"k:{i}"} for i in range(2, 6)])
    with app.store._tx() as conn:  # type: ignore[attr-defined]  # one dead job to review
        conn.execute("UPDATE firesafe_jobs SET state = 'dead', reason = 'exhausted', finished_at = 0 "
                     "WHERE key = 'k:5'")
    yield module, app
    app.close()
    sys.modules.pop(module, None)


def snapshot(app: App) -> list[tuple[str, str, int]]:
    return sorted((j.key, str(j.state), j.runs) for j in app.store.job_list(JobFilter(limit=1000)))


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args, catch_exceptions=True)


def clear(result: Any, args: list[str]) -> None:
    """Exit 0, 1 (one ``error:`` line) or 2 (click usage); no traceback, no stray exception."""
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {type(result.exception).__name__}: {result.exception}") from result.exception
    assert "Traceback" not in result.output, (args, result.output)
    if result.exit_code == 1:
        assert "error:" in result.output or "broken invariant" in result.output, (args, result.output)


READ_ONLY = st.one_of(
    st.tuples(st.just(["jobs"]), st.lists(st.sampled_from(["--state", "--job", "--queue", "--limit", "--json"]),
                                          max_size=3), st.lists(TEXT, max_size=3)),
    st.tuples(st.just(["show"]), st.lists(st.sampled_from(["--json", "--traceback"]), max_size=2),
              st.lists(TEXT, min_size=1, max_size=2)),
    st.tuples(st.just(["dlq", "ls"]), st.lists(st.sampled_from(["--job", "--error", "--queue", "--since", "--until",
                                                                "--limit", "--json"]), max_size=3),
              st.lists(TEXT, max_size=3)),
    st.tuples(st.just(["dlq", "replay"]), st.lists(st.sampled_from(["--job", "--since", "--until", "--error"]),
                                                   max_size=2), st.lists(TEXT, max_size=2)),
    st.tuples(st.just(["dlq", "purge"]), st.lists(st.sampled_from(["--older-than"]), max_size=1),
              st.lists(TEXT, max_size=1)),
    st.tuples(st.just(["stats"]), st.lists(st.sampled_from(["--json"]), max_size=1), st.lists(TEXT, max_size=1)),
    st.tuples(st.just(["rerun"]), st.lists(st.sampled_from(["--from-step", "--json"]), max_size=2),
              st.lists(TEXT, min_size=1, max_size=2)),
    st.tuples(st.just(["cancel"]), st.just([]), st.lists(TEXT, min_size=1, max_size=1)),
)


@FUZZ
@given(command=READ_ONLY, dry=st.booleans())
def test_store_commands_with_fuzzed_options(world: tuple[str, App], command: tuple[list[str], list[str], list[str]],
                                            dry: bool) -> None:
    _, app = world
    head, flags, values = command
    args = [*head]
    for i, flag in enumerate(flags):  # each option followed by a fuzzed value (or by nothing)
        args.append(flag)
        if i < len(values):
            args.append(values[i])
    args += values[len(flags):]
    if head[0] == "dlq" and head[1] in ("replay", "purge") and dry:
        args.append("--dry-run")
    args += ["--store", app.store_url]
    before = snapshot(app)
    result = invoke(args)
    clear(result, args)
    if result.exit_code != 0 or (head[0] == "dlq" and head[1] in ("replay", "purge")):
        # a refusal (or a bulk action without --yes on no terminal, or a dry run) changes nothing;
        # a rerun or cancel that worked may move one job, which is what it is for
        assert snapshot(app) == before, args


@FUZZ
@given(job=st.one_of(st.sampled_from(["add", "anything"]), TEXT),
       options=st.lists(st.tuples(st.sampled_from(["--args", "--kwargs", "--key", "--delay", "--queue", "--json"]),
                                  st.one_of(TEXT, JSON_TEXT := st.recursive(
                                      st.none() | st.integers() | st.text(max_size=5),
                                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c,
                                                                                         max_size=3),
                                      max_leaves=6).map(json.dumps))), max_size=4))
def test_enqueue_with_fuzzed_options(world: tuple[str, App], job: str, options: list[tuple[str, str]]) -> None:
    module, app = world
    args = ["enqueue", f"{module}:app", job]
    for flag, value in options:
        args += [flag] if flag == "--json" else [flag, value]
    before = snapshot(app)
    result = invoke(args)
    clear(result, args)
    after = snapshot(app)
    if result.exit_code != 0:
        assert after == before, args  # no partial write
    else:
        assert len(after) - len(before) in (0, 1)


@pytest.mark.parametrize("payload", [
    "!!python/object/apply:os.system ['echo pwned']",
    "- !!python/tuple [1, 2]",
    "a: 1\nb: [2, 3]",
    "\\x80\\x04\\x95\\n\\x00\\x00\\x00\\x00\\x00\\x00\\x00}\\x94.",
    "gASVCgAAAAAAAAB9lIwBYZRLAXMu",  # base64 of pickle bytes
    "(dp0\nS'a'\np1\nI1\ns.",  # pickle protocol 0
])
@pytest.mark.parametrize("flag", ["--args", "--kwargs"])
def test_cli_payloads_that_are_not_json_are_refused(world: tuple[str, App], payload: str, flag: str) -> None:
    module, app = world
    before = snapshot(app)
    args = ["enqueue", f"{module}:app", "anything", flag, payload]
    result = invoke(args)
    clear(result, args)
    assert result.exit_code == 2 and "JSON" in result.output
    assert snapshot(app) == before


def _sqlite_urls(folder: str) -> Any:
    names = st.text(alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), max_size=12)
    return st.one_of(
        names.map(lambda n: f"sqlite:///{folder}/{n}"),
        names.map(lambda n: f"sqlite:///{folder}/{n}.db?mode=ro"),
        names.map(lambda n: f"sqlite://somehost/{n}"),
        st.sampled_from([f"sqlite:///{folder}/a%00b.db", "sqlite://", "sqlite:///", "sqlite:///:memory:",
                         f"sqlite:///{folder}/no/such/dir/x.db", f"sqlite:///{folder}", "sqlite:",
                         f"SQLITE:///{folder}/x"]),
    )


PG_VALUE = st.one_of(st.text(alphabet="abcxyzABC_019-. :;'\"\\é", max_size=10),
                     st.sampled_from(["disable", "require", "verify-full", "", "-c x=1", "Robert';DROP", "pg_x"]))
PG_PARAMS = st.dictionaries(st.sampled_from(["schema", "application_name", "sslmode", "options"]), PG_VALUE,
                            max_size=3)
PG_URLS = st.builds(
    lambda scheme, user, port, db, params: f"{scheme}://{user}@127.0.0.1{port}/{db}" + (
        "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""),
    st.sampled_from(["postgresql", "postgres", "PostgreSQL", "postgresq1"]),
    st.one_of(st.just("postgres"), st.text(alphabet="abcxyz_%0:", max_size=6)),
    st.sampled_from(["", ":5432", ":1", ":99999", ":abc", ":"]),
    st.one_of(st.just("test"), st.text(alphabet="abcz_%0?#[", max_size=6)),
    PG_PARAMS,
)
GARBAGE = st.one_of(st.text(max_size=30), st.sampled_from(["", ":", "://", "http://127.0.0.1/x", "mysql://x", "file:///x",
                                                          "postgresql://[::1/x", "sqlite:/" + "x" * 300]))


def local_only(url: str) -> bool:
    """Whether a URL could only reach this machine (never let a fuzzed URL talk to another address)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme not in ("postgresql", "postgres"):
        return True
    from psycopg.conninfo import conninfo_to_dict

    from firesafe.store.postgres import parse_url

    try:
        params = conninfo_to_dict(parse_url(url)[0])
    except Exception:  # libpq cannot even read it: it will not connect anywhere
        return True
    return params.get("host") in (None, "127.0.0.1") and "hostaddr" not in params and "service" not in params


@settings(max_examples=80, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_store_urls_work_or_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: st.DataObject) -> None:
    need_postgres()
    monkeypatch.chdir(tmp_path)  # a relative SQLite path lands in the test's folder, never in the checkout
    url = data.draw(st.one_of(_sqlite_urls(str(tmp_path)), PG_URLS, GARBAGE))
    assume(local_only(url))
    postgres = url.split(":", 1)[0].lower() in ("postgresql", "postgres")
    try:
        # (a short pool timeout: a refused connection is reported after it, and there are many here)
        store = open_store(url, timeout=0.5) if postgres else open_store(url)
        try:
            version = store.schema_version()
        finally:
            store.close()
    except FiresafeError as exc:
        assert str(exc).strip()
        return
    assert version >= 0


#: PostgreSQL URLs that are answered at once (a refused connection costs the pool's whole timeout,
#: 5 s, in the CLI; test_store_urls_work_or_say_why covers those with a short one)
PG_FAST = st.one_of(
    st.builds(lambda params: "postgresql://postgres@127.0.0.1:5432/test?" + "&".join(
        f"{k}={v}" for k, v in params.items()),
        st.dictionaries(st.sampled_from(["schema", "application_name"]), PG_VALUE, min_size=1, max_size=2)),
    st.sampled_from(["postgresql://postgres@127.0.0.1:99999/test", "postgresql://postgres@127.0.0.1:abc/test",
                     "postgresql://[::1/test", "postgresq1://postgres@127.0.0.1/test"]),
)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=st.one_of(PG_FAST, GARBAGE, st.text(max_size=10).map(lambda n: f"sqlite:///nowhere/{n}.db")),
       command=st.sampled_from([["jobs"], ["stats"], ["dlq", "ls"], ["show", "k:1"], ["migrate"]]))
def test_cli_store_urls_end_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str,
                                        command: list[str]) -> None:
    need_postgres()
    monkeypatch.chdir(tmp_path)
    assume(local_only(url))
    args = [*command, "--store", url]
    result = invoke(args)
    clear(result, args)


def test_cli_store_that_refuses_the_connection_ends_in_one_line() -> None:
    need_postgres()
    args = ["jobs", "--store", "postgresql://postgres@127.0.0.1:5432/no_such_database_here"]
    result = invoke(args)
    clear(result, args)
    assert result.exit_code == 1 and "no_such_database_here" in result.output and "does not exist" in result.output
