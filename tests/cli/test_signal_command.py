"""`firesafe signal KEY NAME --data JSON`: sends a signal to a job that waits for it, records who and
why, and `firesafe show` shows the wait, the signal and the wake-up. Both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from firesafe import App, State
from firesafe.cli.main import cli


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def waiting(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.job()
    def refund(ctx, order: str) -> object:
        return ctx.wait_for_signal("approval", timeout=86400)

    refund.enqueue("o-1", key="refund:o-1")
    app.work(burst=True)
    assert app.get("refund:o-1").state == State.SCHEDULED
    yield app
    app.close()


def test_signal_wakes_the_waiting_job_and_show_tells_the_story(waiting: App) -> None:
    url = waiting.store_url
    sent = run("signal", "refund:o-1", "approval", "--data", '{"approved": true, "note": "ok"}', "--actor", "ann",
               "--reason", "ticket 81", "--store", url)
    assert sent.exit_code == 0, sent.output
    assert sent.output == ("refund:o-1: signal 'approval' sent with {\"approved\": true, \"note\": \"ok\"}; "
                           "the job was waiting for it and runs now\n")
    waiting.work(burst=True)
    assert waiting.get("refund:o-1").result == {"approved": True, "note": "ok"}

    shown = json.loads(run("show", "refund:o-1", "--json", "--store", url).stdout)
    assert shown["signals"] == [{"name": "approval", "data": {"approved": True, "note": "ok"}, "actor": "ann",
                                 "reason": "ticket 81", "sent_at": shown["signals"][0]["sent_at"]}]
    assert [(e["kind"], e["actor"], e["detail"]) for e in shown["events"]] == [
        ("signal_sent", "ann", {"name": "approval", "woke": True, "reason": "ticket 81"})]
    steps = [a["detail"]["steps"][-1] for a in shown["trace"]]
    assert steps == [{"name": "signal:approval", "status": "waiting"},
                     {"name": "signal:approval", "status": "signal", "by": "ann"}]
    table = run("show", "refund:o-1", "--store", url).output
    assert "waiting for signal 'approval' until" in table and "signal:approval signal" in table
    assert "signals" in table and "ticket 81" in table and "signal_sent" in table


def test_signal_sent_twice_is_delivered_once_and_other_data_is_refused(waiting: App) -> None:
    url = waiting.store_url
    first = json.loads(run("signal", "refund:o-1", "approval", "--data", "true", "--actor", "ann", "--json",
                           "--store", url).stdout)
    assert (first["sent"], first["woke"], first["data"], first["actor"]) == (True, True, True, "ann")
    again = run("signal", "refund:o-1", "approval", "--data", "true", "--actor", "bob", "--store", url)
    assert again.exit_code == 0 and "was sent already by ann" in again.output and "nothing changed" in again.output
    other = run("signal", "refund:o-1", "approval", "--data", "false", "--store", url)
    assert other.exit_code == 1
    assert other.output.strip().endswith("with other data; a signal is delivered once, as first sent")
    assert len(other.output.strip().splitlines()) == 1
    assert [s.actor for s in waiting.signals("refund:o-1")] == ["ann"]


def test_signal_mistakes_get_one_clear_line(waiting: App) -> None:
    url = waiting.store_url
    for args, code, message in [
        (("nope", "approval"), 1, "no job with key 'nope'"),
        (("refund:o-1", "bad name"), 1, "invalid signal name 'bad name'"),
        (("refund:o-1", "approval", "--data", "{nope"), 2, "not valid JSON"),
        (("refund:o-1", "approval", "--data", '"\\ud800"'), 1, "not valid Unicode"),
    ]:
        result = run("signal", *args, "--store", url)
        assert result.exit_code == code, result.output
        assert message in result.output and "Traceback" not in result.output
    assert waiting.signals("refund:o-1") == []


def test_signal_output_escapes_hostile_data(waiting: App) -> None:
    url = waiting.store_url
    result = run("signal", "refund:o-1", "approval", "--data", '{"note": "\\u001b[2Jred\\u202e", "password": "s3"}',
                 "--actor", "eve\x1b[31m", "--store", url)
    assert result.exit_code == 0
    assert "\x1b" not in result.output and "\u202e" not in result.output and "s3" not in result.output
    shown = run("show", "refund:o-1", "--store", url).output
    assert "\x1b" not in shown and "s3" not in shown
    assert waiting.signals("refund:o-1")[0].value() == {"note": "\x1b[2Jred\u202e", "password": "s3"}
