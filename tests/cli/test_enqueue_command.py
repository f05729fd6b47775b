"""`firesafe enqueue MODULE:APP JOB`: imports the app, enqueues idempotently, and explains mistakes."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from firesafe.cli.main import cli
from tests.cli.conftest import AppModule

SECRET = "sk-live-9999"


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_enqueue_is_idempotent_per_key_and_conflicts_are_errors(inprocess_app: AppModule) -> None:
    target = inprocess_app.target
    first = run("enqueue", target, "add", "--args", "[1, 2]", "--key", "add:1")
    assert first.exit_code == 0 and first.stdout.strip() == "enqueued add:1  (job add, queue math, state queued)"
    again = run("enqueue", target, "add", "--args", "[1, 2]", "--key", "add:1", "--json")
    data = json.loads(again.stdout)
    assert data["created"] is False and data["key"] == "add:1" and data["arguments"] == {"a": 1, "b": 2}
    conflict = run("enqueue", target, "add", "--args", "[1, 3]", "--key", "add:1")
    assert conflict.exit_code == 1
    assert conflict.output.strip() == ("error: key 'add:1' is already taken: it was enqueued with different "
                                       "arguments; nothing was enqueued")


def test_enqueue_masks_secrets_and_takes_a_delay(inprocess_app: AppModule) -> None:
    result = run("enqueue", inprocess_app.target, "charge", "--kwargs",
                 json.dumps({"order_id": "o-1", "api_key": SECRET}), "--delay", "10m", "--json")
    assert result.exit_code == 0 and SECRET not in result.output
    data = json.loads(result.stdout)
    assert data["created"] and data["state"] == "scheduled" and data["arguments"]["api_key"] == "********"


def test_enqueue_takes_a_priority_and_refuses_one_out_of_range(inprocess_app: AppModule) -> None:
    result = run("enqueue", inprocess_app.target, "add", "--args", "[1, 2]", "--key", "add:p", "--priority", "7",
                 "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["priority"] == 7
    plain = json.loads(run("enqueue", inprocess_app.target, "add", "--args", "[2, 2]", "--json").stdout)
    assert plain["priority"] == 0
    for bad in ("101", "-101", "high"):
        refused = run("enqueue", inprocess_app.target, "add", "--args", "[3, 3]", "--priority", bad)
        assert refused.exit_code == 2 and "--priority" in refused.output and "Traceback" not in refused.output


def test_bad_json_arguments_are_usage_errors(inprocess_app: AppModule) -> None:
    for option, value in (("--args", "[1, "), ("--args", '{"a": 1}'), ("--kwargs", "[1]"),
                          ("--kwargs", '{"key": "x"}'), ("--delay", "later")):
        result = run("enqueue", inprocess_app.target, "add", option, value)
        assert result.exit_code == 2, (option, value)
        assert "Traceback" not in result.output and option in result.output


def test_arguments_the_job_cannot_take_are_refused(inprocess_app: AppModule) -> None:
    result = run("enqueue", inprocess_app.target, "add", "--args", "[1]", "--kwargs", '{"c": 3}')
    assert result.exit_code == 1 and "cannot take these arguments" in result.output
    unknown = run("enqueue", inprocess_app.target, "nope")
    assert unknown.exit_code == 1 and "no job named 'nope' is declared" in unknown.output


def test_app_import_mistakes_are_one_line_errors(inprocess_app: AppModule) -> None:
    d = inprocess_app.dir
    (d / "broken_mod.py").write_text("import os\nvalue = 1 / 0\n")
    (d / "not_an_app.py").write_text("app = object()\n")
    (d / "imports_missing.py").write_text("import no_such_dependency_xyz\n")
    cases = {
        "nocolon": "expected the app as module:attribute",
        "no_such_module_xyz:app": "cannot import 'no_such_module_xyz': no module named 'no_such_module_xyz'",
        f"{inprocess_app.name}:nope": f"module '{inprocess_app.name}' has no attribute 'nope'",
        "not_an_app:app": "not_an_app:app is an object, not a firesafe.App",
        "broken_mod:app": "importing 'broken_mod' failed: ZeroDivisionError: division by zero (broken_mod.py, line 2)",
        "imports_missing:app": "No module named 'no_such_dependency_xyz' (imports_missing.py, line 1)",
    }
    for target, message in cases.items():
        result = run("enqueue", target, "add")
        assert result.exit_code == 1, target
        assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
