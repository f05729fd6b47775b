"""``firesafe events`` from the shell."""

from __future__ import annotations

import json
import sys
import textwrap

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
    r = runner.invoke(cli, ["events", "ls", "--rejected", "--store", sqlite_url])
    assert r.exit_code == 0 and "no message id" in r.output
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
