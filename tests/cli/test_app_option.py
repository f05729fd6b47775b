"""Store commands find the store the app names (--app, $FIRESAFE_APP), and a store command pointed at
a SQLite file that does not exist says so and creates nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from firesafe import App
from tests.cli.conftest import AppModule, run_cli, write_app


@pytest.fixture
def named(tmp_path: Path, store_url: str) -> AppModule:
    """An app module whose App names the test's store, with one dead job in it."""
    module = write_app(tmp_path, store_url)
    app = App(store_url)

    @app.job(name="charge", max_attempts=1)
    def charge(ctx, order_id: str, api_key: str) -> None:
        raise RuntimeError("declined")

    charge.enqueue("bad-1", "k", key="charge:bad-1")
    app.work(burst=True)
    app.close()
    return module


def test_app_option_and_variable_find_the_apps_store(named: AppModule) -> None:
    by_flag = run_cli(["dlq", "ls", "--app", named.target, "--json"], named.dir)
    assert by_flag.returncode == 0, by_flag.stderr
    assert [j["key"] for j in json.loads(by_flag.stdout)["items"]] == ["charge:bad-1"]
    by_env = run_cli(["show", "charge:bad-1", "--json"], named.dir, FIRESAFE_APP=named.target)
    assert by_env.returncode == 0 and json.loads(by_env.stdout)["state"] == "dead"
    replay = run_cli(["dlq", "replay", "charge:bad-1", "--reason", "via app"], named.dir, FIRESAFE_APP=named.target,
                     FIRESAFE_ACTOR="ops")
    assert replay.returncode == 0, replay.stderr
    both = run_cli(["jobs", "--app", named.target, "--store", named.url], named.dir)
    assert both.returncode == 2 and "not both" in both.stderr


def test_firesafe_store_wins_over_firesafe_app(named: AppModule, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    assert run_cli(["migrate", "--store", f"sqlite:///{other}"], named.dir).returncode == 0
    result = run_cli(["jobs", "--json"], named.dir, FIRESAFE_APP=named.target, FIRESAFE_STORE=f"sqlite:///{other}")
    assert result.returncode == 0 and json.loads(result.stdout) == []


def test_a_bad_app_is_one_line(tmp_path: Path) -> None:
    result = run_cli(["jobs", "--app", "nosuchmodule:app"], tmp_path)
    assert result.returncode == 1 and result.stderr.strip().startswith("error: cannot import 'nosuchmodule'")


def test_a_missing_sqlite_file_is_refused_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "incident.db"
    for command in (["jobs"], ["dlq", "ls"], ["dlq", "replay", "--yes"], ["cancel", "k:1"], ["show", "k:1"]):
        result = run_cli([*command, "--store", f"sqlite:///{missing}"], tmp_path)
        assert result.returncode == 1, command
        line = result.stderr.strip()
        assert line.startswith(f"error: no store at {missing}: the file does not exist, and nothing was created")
        assert len(line.splitlines()) == 1
        assert not os.path.exists(missing) and not list(tmp_path.glob("incident.db*"))
