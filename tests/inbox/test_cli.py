"""``firesafe events`` from the shell."""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import datetime, timedelta

from click.testing import CliRunner

from firesafe import App
from firesafe.cli.main import cli


def test_events_ls_unhandled_rejected_and_replay(sqlite_url: str, tmp_path, monkeypatch) -> None:
    app = App(sqlite_url)
    app.ingest("crm", event_id="c1", type="contact.created", data={"email": "a@b", "api_key": "sk_1"})
    app.inbox.reject("orders", "no message id", b'{"no": "id"}')
    runner = CliRunner()
    r = runner.invoke(cli, ["events", "ls", "--unhandled", "--json", "--store", sqlite_url])
    assert r.exit_code == 0, r.output
    [row] = json.loads(r.output)
    assert row["event_id"] == "c1" and row["data"]["api_key"] == "********"
    assert datetime.fromisoformat(row["received_at"]).utcoffset() == timedelta(0)  # ISO 8601, like other --json
    assert "T" in row["received_at"] and row["received_at"].endswith("+00:00")
    r = runner.invoke(cli, ["events", "ls", "--rejected", "--store", sqlite_url])
    assert r.exit_code == 0 and "no message id" in r.output
    [reject] = json.loads(runner.invoke(cli, ["events", "ls", "--rejected", "--json", "--store", sqlite_url]).output)
    assert reject["received_at"].endswith("+00:00")
    (tmp_path / "crmapp.py").write_text(textwrap.dedent(f"""
        from firesafe import App
        app = App({sqlite_url!r})

        @app.on_event("crm", "contact.created")
        def on_contact(ctx, event):
            return event.data["email"]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(cli, ["events", "replay", "crmapp:app"])
    assert r.exit_code == 0 and "enqueued 1 handler job" in r.output, r.output
    sys.modules.pop("crmapp", None)
    job = app.get("crm:c1")
    assert job.name == "on_contact" and job.state == "queued"
    assert app.inbox.list(unhandled=True) == []
    app.close()


def test_events_ls_and_replay_explain_what_they_found(sqlite_url: str, tmp_path, monkeypatch) -> None:
    app = App(sqlite_url)
    app.store.migrate()
    runner = CliRunner()
    r = runner.invoke(cli, ["events", "ls", "--store", sqlite_url])
    assert r.exit_code == 0 and r.output.strip() == "no events match", r.output
    r = runner.invoke(cli, ["events", "ls", "--rejected", "--source", "orders", "--store", sqlite_url])
    assert r.exit_code == 0 and r.output.strip() == "no rejected messages of source 'orders'"
    r = runner.invoke(cli, ["events", "ls", "--unhandled", "--rejected", "--store", sqlite_url])
    assert r.exit_code == 2 and "--unhandled or --rejected, not both" in r.output
    app.ingest("crm", event_id="c1", type="contact.created", data={})
    app.inbox.reject("orders", "no message id", b"{}")
    for args in (["events", "ls"], ["events", "ls", "--rejected"]):
        r = runner.invoke(cli, [*args, "--store", sqlite_url])
        assert r.exit_code == 0 and "Z " in r.output  # the received time shows its zone, as other tables do
    (tmp_path / "crmapp2.py").write_text(f"from firesafe import App\napp = App({sqlite_url!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        r = runner.invoke(cli, ["events", "replay", "crmapp2:app", "--source", "nosuch"])
        assert r.exit_code == 0 and "enqueued 0" in r.output
        assert "no event of source 'nosuch' is stored" in r.output
        r = runner.invoke(cli, ["events", "replay", "crmapp2:app", "--source", "crm"])
        assert "unhandled events of source 'crm' remain" in r.output and "no event of source" not in r.output
    finally:
        sys.modules.pop("crmapp2", None)
        app.close()
