"""`firesafe alerts ls` (history with delivery status) and `firesafe alerts test` (a real subprocess)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import click
from click.testing import CliRunner

from firesafe import App, Backoff
from firesafe.alerts import Log, Webhook
from firesafe.cli.main import cli
from tests.alerts.receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_alerts_ls_shows_each_alert_with_its_delivery_status(sqlite_url: str) -> None:
    receiver = Receiver().up()
    down = f"http://127.0.0.1:{closed_port()}/hook"
    app = App(sqlite_url, alerts=[Webhook(receiver.url, secret="s", allow_private=True),
                                  Webhook(down, secret="s", allow_private=True, name="backup")])
    app.alert_rules(dispatch=False)

    @app.job(max_attempts=1, backoff=Backoff(base=0, cap=0, jitter="none"))
    def charge(ctx, token: str) -> None:
        raise RuntimeError("declined")

    try:
        charge.enqueue("tok_secret_value", key="charge:1")
        app.work(burst=True)
        app.alerts.record("schedule_missed", job_name="nightly", payload={"windows": 2})
        app.alerts.flush()
    finally:
        app.close()
        receiver.close()
    result = run("alerts", "ls", "--store", sqlite_url)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "dead_letter" in out and "charge" in out and "schedule_missed" in out
    assert "webhook:127.0.0.1: delivered" in out
    assert "backup: pending (1 attempt)" in out and "ConnectError" in out
    data = json.loads(run("alerts", "ls", "--store", sqlite_url, "--json", "--kind", "dead_letter", "--full").output)
    [alert] = data["alerts"]
    assert alert["kind"] == "dead_letter" and alert["keys"] == ["charge:1"] and data["waiting_events"] == 0
    states = {d["sink"]: (d["state"], d["attempts"]) for d in alert["deliveries"]}
    assert states == {"webhook:127.0.0.1": ("delivered", 1), "backup": ("pending", 1)}
    # times are ISO 8601 with their offset, as in every other --json output
    times = {d["sink"]: d["delivered_at"] or d["next_at"] for d in alert["deliveries"]}
    for stamp in (alert["created_at"], *times.values()):
        assert "T" in stamp and stamp.endswith("+00:00"), stamp
        assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0)
    assert alert["document"]["jobs"][0]["attempts"][0]["message"] == "declined"
    assert "tok_secret_value" not in json.dumps(data)


def test_alerts_ls_on_a_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["alerts", "ls", "--store", f"sqlite:///{tmp_path}/nothing.db"])
    assert result.exit_code == 1 and ("no firesafe store" in result.output or "no store at" in result.output)
    assert "Traceback" not in result.output and not (tmp_path / "nothing.db").exists()


def test_alerts_test_sends_to_every_sink_and_says_which_failed(tmp_path: Path) -> None:
    receiver = Receiver().up()
    url = f"sqlite:///{tmp_path}/alerts.db"
    module = tmp_path / "alertapp.py"
    module.write_text(
        "from firesafe import App\n"
        "from firesafe.alerts import Log, Webhook\n"
        f"app = App({url!r}, alerts=[Log(), Webhook({receiver.url!r}, secret='test-secret', allow_private=True),\n"
        f"    Webhook('http://127.0.0.1:{closed_port()}/x', secret='s', allow_private=True, name='down')])\n")
    try:
        proc = subprocess.run([sys.executable, "-m", "firesafe", "alerts", "test", "alertapp:app", "--json"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    finally:
        receiver.close()
    assert proc.returncode == 1, proc.stderr
    results = json.loads(proc.stdout)
    assert results["log"] == {"delivered": True, "error": None}
    assert results["webhook:127.0.0.1"] == {"delivered": True, "error": None}
    assert results["down"]["delivered"] is False and "ConnectError" in results["down"]["error"]
    [req] = receiver.got
    assert req.valid and req.json["kind"] == "test" and req.json["status"] == "info"
    listed = run("alerts", "ls", "--store", url, "--json").output
    assert json.loads(listed)["alerts"][0]["kind"] == "test"
    # An app without sinks: a clear error, no traceback.
    (tmp_path / "nosinks.py").write_text(f"from firesafe import App\napp = App({url!r})\n")
    proc = subprocess.run([sys.executable, "-m", "firesafe", "alerts", "test", "nosinks:app"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "has no alert sinks" in proc.stderr and "Traceback" not in proc.stderr
    assert Log().name == "log"
