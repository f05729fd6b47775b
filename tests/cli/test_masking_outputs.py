"""Secrets through the real output paths (invariant 9): the stored trace, `firesafe show` and its
--json, the worker's log lines (text and JSON), `firesafe migrate` and the store errors.

Given a job whose error quotes an Authorization header, a URL with its password and a quoted
password, whose argument is a DSN and whose result and log fields carry secrets; when it runs in a
real worker process and is read back; then no output holds a secret, and each shows where one was.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli
from tests.cli.conftest import run_cli
from tests.conftest import drop_schema, need_postgres

#: Every secret the job lets out; none may be printed or stored.
SECRETS = ["abc.def", "pw-sekrit", "two words", "dsn-sekrit"]
MESSAGE = ('refused: Authorization: Bearer abc.def via postgresql://app:pw-sekrit@db.internal/x; '
           'password: "two words"')
SHOWN = ["Authorization: Bearer ********", "postgresql://app:********@db.internal/x", 'password: "********"']
DSN = "postgresql://svc:dsn-sekrit@db.internal/y"

APP_SOURCE = '''
from firesafe import App

app = App({url!r})


@app.job(max_attempts=1)
def leak(ctx, order_id: str, dsn: str) -> None:
    ctx.log("connecting", target=dsn, header="Authorization: Bearer abc.def")
    raise RuntimeError({message!r})


@app.job()
def fine(ctx, order_id: str) -> dict:
    return {{"order": order_id, "note": "Authorization: Bearer abc.def", "url": "postgresql://app:pw-sekrit@db/x"}}
'''


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def no_secret(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} printed in:\n{text}"


def write_module(directory: Path, url: str) -> str:
    name = f"maskapp_{uuid.uuid4().hex[:8]}"
    (directory / f"{name}.py").write_text(APP_SOURCE.format(url=url, message=MESSAGE))
    return f"{name}:app"


def enqueue(url: str, *keys: str) -> None:
    app = App(url)
    leak = app.job(max_attempts=1, name="leak")(lambda ctx, order_id, dsn: None)
    fine = app.job(name="fine")(lambda ctx, order_id: None)
    for key in keys:
        if key.startswith("leak"):
            leak.enqueue(key, DSN, key=key)
        else:
            fine.enqueue(key, key=key)
    app.close()


@pytest.fixture
def ran(store_url: str, tmp_path: Path) -> dict[str, Any]:
    """Both jobs run by a real `firesafe worker --burst` (text logs); the worker's stderr kept."""
    target = write_module(tmp_path, store_url)
    enqueue(store_url, "leak:1", "fine:1")
    proc = run_cli(["worker", target, "--burst"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    return {"url": store_url, "target": target, "dir": tmp_path, "log": proc.stderr}


def test_the_stored_trace_is_masked_when_it_is_written(ran: dict[str, Any]) -> None:
    app = App(ran["url"], auto_migrate=False)
    try:
        job = app.get("leak:1")
    finally:
        app.close()
    assert str(job.state) == "dead"
    [attempt] = job.trace
    for text in (attempt.message or "", attempt.traceback or "", job.error_message or ""):
        no_secret(text)
        assert all(shown in text for shown in SHOWN), text


def test_show_and_its_json_print_no_secret(ran: dict[str, Any]) -> None:
    text = run("show", "leak:1", "--store", ran["url"])
    assert text.exit_code == 0, text.output
    no_secret(text.output)
    assert "Bearer ********" in text.output and "app:********@db.internal" in text.output
    as_json = run("show", "leak:1", "--json", "--store", ran["url"])
    no_secret(as_json.output)
    doc = json.loads(as_json.stdout)
    assert doc["arguments"] == {"order_id": "leak:1", "dsn": "********"}
    assert all(shown in doc["trace"][0]["message"] for shown in SHOWN)
    fine = run("show", "fine:1", "--json", "--store", ran["url"])
    no_secret(fine.output)
    assert json.loads(fine.stdout)["result"] == {"order": "fine:1", "note": "Authorization: Bearer ********",
                                                 "url": "postgresql://app:********@db/x"}
    listed = run("jobs", "--json", "--store", ran["url"])
    no_secret(listed.output)


def test_worker_log_lines_print_no_secret(ran: dict[str, Any]) -> None:
    no_secret(ran["log"])
    assert "target=postgresql://svc:********@db.internal/y header=Authorization: Bearer ********" in ran["log"]
    assert "Bearer ********" in ran["log"].split("leak leak:1 attempt=1")[1]
    enqueue(ran["url"], "leak:2")
    proc = run_cli(["worker", ran["target"], "--burst", "--log-format", "json"], ran["dir"])
    assert proc.returncode == 0, proc.stderr
    no_secret(proc.stderr)
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    [logged] = [r for r in lines if r["message"].startswith("connecting")]
    assert logged["f_header"] == "Authorization: Bearer ********"
    assert logged["f_target"] == "postgresql://svc:********@db.internal/y"


# -- the store URL ------------------------------------------------------------------------------
def test_migrate_never_prints_a_store_password(tmp_path: Path) -> None:
    need_postgres()
    schema = f"fs_test_{uuid.uuid4().hex[:12]}"
    try:
        for url in (f"postgresql://postgres:sekrit@127.0.0.1:5432/test?schema={schema}",  # trust auth: any password
                    f"postgresql://postgres@127.0.0.1:5432/test?password=sekrit&schema={schema}"):
            for extra in ([], ["--json"]):
                result = run("migrate", "--store", url, *extra)
                assert result.exit_code == 0, result.output
                assert "sekrit" not in result.output and "********" in result.output
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("url", [
    "postgresql://postgres:sekrit@127.0.0.1:1/test?schema=nothere",  # nothing listens on port 1
    "postgresql://postgres@127.0.0.1:1/test?password=sekrit",
    "postgresql://postgres:sek/rit@127.0.0.1:5432/test",  # a '/' in the password: urllib reads "sek" as the port
    "postgresq://postgres:sekrit@127.0.0.1/test",  # a misspelt scheme
    "sqlite://user:sekrit@host/x.db",
])
def test_store_errors_never_print_the_password(url: str, tmp_path: Path) -> None:
    for args in (["migrate", "--store", url], ["migrate", "--store", url, "--json"], ["jobs", "--store", url]):
        proc = run_cli(args, tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "error:" in proc.stderr and "Traceback" not in proc.stderr
        assert "sek" not in proc.stdout + proc.stderr  # not even the piece urllib takes for a port


def test_commands_that_import_no_app_take_the_users_names_from_the_environment(sqlite_url: str,
                                                                                tmp_path: Path) -> None:
    app = App(sqlite_url)
    app.job(name="pay")(lambda ctx, iban, memo: None).enqueue("DE89370400440532013000", memo="EMP-123456",
                                                             key="pay:1")
    app.close()
    plain = json.loads(run_cli(["show", "pay:1", "--json", "--store", sqlite_url], tmp_path).stdout)
    assert plain["arguments"] == {"iban": "DE89370400440532013000", "memo": "EMP-123456"}
    proc = run_cli(["show", "pay:1", "--json", "--store", sqlite_url], tmp_path,
                   FIRESAFE_MASK_NAMES="iban, tax_id", FIRESAFE_MASK_PATTERNS="EMP-[0-9]{6}")
    assert json.loads(proc.stdout)["arguments"] == {"iban": "********", "memo": "********"}
    for args in (["show", "pay:1", "--store", sqlite_url], ["migrate", "--store", sqlite_url]):
        bad = run_cli(args, tmp_path, FIRESAFE_MASK_PATTERNS="(")  # a mistake: one line, nothing unmasked
        assert bad.returncode == 1 and bad.stdout == "" and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.startswith("error: $FIRESAFE_MASK_NAMES / $FIRESAFE_MASK_PATTERNS: "), bad.stderr
