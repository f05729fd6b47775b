"""`firesafe dlq`: list, show, replay and discard (with dry runs and confirmations), purge."""

from __future__ import annotations

import json
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from firesafe import App, Permanent
from firesafe.cli.main import cli

SECRET = "hunter2-secret"


def run(*args: str, input: str | None = None) -> click.testing.Result:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.fixture
def dead(store_url: str) -> Iterator[App]:
    """Three dead jobs: two refunds (RuntimeError, one with a secret) and one sync (ValueError)."""
    app = App(store_url)

    @app.job(max_attempts=1)
    def refund(ctx, order_id: str, password: str = "") -> None:
        raise RuntimeError(f"provider down for {order_id}")

    @app.job(give_up_on=(ValueError,))
    def sync(ctx, day: str) -> None:
        raise ValueError("bad day")

    @app.job()
    def ok(ctx) -> str:
        raise Permanent("not yet")

    refund.enqueue("o-1", password=SECRET, key="refund:o-1")
    refund.enqueue("o-2", key="refund:o-2")
    sync.enqueue("2024-05-01", key="sync:2024-05-01")
    app.work(burst=True)
    yield app
    app.close()


def states(app: App, *keys: str) -> list[str]:
    return [str(app.get(k).state) for k in keys]


ALL = ("refund:o-1", "refund:o-2", "sync:2024-05-01")


def test_ls_filters_and_masks(dead: App) -> None:
    url = dead.store_url
    out = run("dlq", "ls", "--store", url).output
    assert all(k in out for k in ALL) and "3 of 3 dead job(s)" in out
    refunds = json.loads(run("dlq", "ls", "--job", "refund", "--json", "--store", url).stdout)["items"]
    assert sorted(j["key"] for j in refunds) == ["refund:o-1", "refund:o-2"]
    assert refunds[-1]["arguments"]["password"] == "********"
    by_error = json.loads(run("dlq", "ls", "--error", "ValueError", "--json", "--store", url).stdout)["items"]
    assert [j["key"] for j in by_error] == ["sync:2024-05-01"]
    assert len(json.loads(run("dlq", "ls", "--since", "1h", "--json", "--store", url).stdout)["items"]) == 3
    assert json.loads(run("dlq", "ls", "--until", "1h", "--json", "--store", url).stdout)["items"] == []
    assert json.loads(run("dlq", "ls", "--since", "2000-01-01T00:00:00Z", "--json", "--store", url).stdout)["total"]
    assert run("dlq", "ls", "--since", "last tuesday", "--store", url).exit_code == 2


def test_dlq_show_masks_the_secret(dead: App) -> None:
    for extra in ([], ["--json"]):
        result = run("dlq", "show", "refund:o-1", *extra, "--store", dead.store_url)
        assert result.exit_code == 0 and SECRET not in result.output and "********" in result.output
        assert "provider down for o-1" in result.output


def test_replay_dry_run_changes_nothing(dead: App) -> None:
    result = run("dlq", "replay", "--job", "refund", "--dry-run", "--store", dead.store_url)
    assert result.exit_code == 0
    assert "dry run: 2 job(s) would be replayed; nothing changed" in result.output
    assert states(dead, *ALL) == ["dead", "dead", "dead"]
    assert all(not dead.get(k).events for k in ALL)
    data = json.loads(run("dlq", "replay", "--dry-run", "--json", "--store", dead.store_url).stdout)
    assert data["count"] == 3 and sorted(data["keys"]) == sorted(ALL)


def test_bulk_replay_without_yes_and_without_a_terminal_refuses(dead: App) -> None:
    for args in (["--job", "refund"], [], ["refund:o-1", "refund:o-2"]):
        result = run("dlq", "replay", *args, "--store", dead.store_url, input="y\n")
        assert result.exit_code == 1, args
        assert "refusing to replay" in result.output and "--yes" in result.output
    assert states(dead, *ALL) == ["dead", "dead", "dead"]


def test_replay_one_key_needs_no_confirmation_and_records_who(dead: App) -> None:
    result = run("dlq", "replay", "refund:o-2", "--store", dead.store_url)
    assert result.exit_code == 0 and "replayed 1 job(s)" in result.output
    job = dead.get("refund:o-2")
    assert job.state == "queued" and len(job.trace) == 1  # the history stays
    assert [e.kind for e in job.events] == ["replayed"] and "@" in (job.events[0].actor or "")


def test_a_key_that_is_not_dead_is_skipped_with_the_state_that_kept_it(dead: App) -> None:
    @dead.job
    def fine(ctx) -> int:
        return 1

    fine.enqueue(key="fine:1")
    dead.work(burst=True)
    alone = run("dlq", "replay", "fine:1", "--store", dead.store_url)
    assert alone.exit_code == 0
    assert "skipping 1 job(s) that are not dead or cancelled: fine:1 (succeeded)" in alone.stderr
    assert "nothing to replay" in alone.stdout
    mixed = run("dlq", "replay", "fine:1", "refund:o-2", "--yes", "--json", "--store", dead.store_url)
    data = json.loads(mixed.stdout)
    assert data["keys"] == ["refund:o-2"] and data["skipped"] == ["fine:1"]
    assert data["reasons"] == {"fine:1": "succeeded"}
    preview = json.loads(run("dlq", "discard", "fine:1", "--dry-run", "--json", "--store", dead.store_url).stdout)
    assert preview["skipped"] == ["fine:1"] and preview["reasons"] == {"fine:1": "succeeded"}


def test_bulk_replay_with_yes_moves_exactly_the_matching_jobs(dead: App) -> None:
    result = run("dlq", "replay", "--job", "refund", "--yes", "--json", "--store", dead.store_url)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["count"] == 2 and sorted(data["keys"]) == ["refund:o-1", "refund:o-2"] and data["skipped"] == []
    assert states(dead, *ALL) == ["queued", "queued", "dead"]
    again = run("dlq", "replay", "--job", "refund", "--yes", "--store", dead.store_url)
    assert again.exit_code == 0 and "nothing to replay" in again.output


def test_bulk_actions_show_progress(dead: App) -> None:
    result = run("dlq", "discard", "--yes", "--store", dead.store_url)
    assert result.exit_code == 0 and result.stdout.strip().startswith("discarded 3 job(s) as ")
    assert "discard" in result.stderr and "3/3" in result.stderr  # the progress bar, on stderr


def test_keys_and_filters_together_are_a_usage_error(dead: App) -> None:
    result = run("dlq", "replay", "refund:o-1", "--job", "refund", "--store", dead.store_url)
    assert result.exit_code == 2 and "not both" in result.output


def test_replaying_an_unknown_key_is_a_clear_error(dead: App) -> None:
    result = run("dlq", "replay", "refund:o-404", "--store", dead.store_url)
    assert result.exit_code == 1 and result.output.strip() == "error: no job with key(s): refund:o-404"


def test_discard_by_filter(dead: App) -> None:
    preview = run("dlq", "discard", "--error", "ValueError", "--dry-run", "--store", dead.store_url)
    assert "1 job(s) would be discarded" in preview.output and states(dead, "sync:2024-05-01") == ["dead"]
    result = run("dlq", "discard", "--error", "ValueError", "--yes", "--store", dead.store_url)
    assert result.exit_code == 0 and "discarded 1 job(s)" in result.output
    job = dead.get("sync:2024-05-01")
    assert job.state == "cancelled" and job.reason == "discarded" and job.events[-1].kind == "discarded"
    assert states(dead, "refund:o-1", "refund:o-2") == ["dead", "dead"]


def test_purge_asks_then_deletes_and_frees_the_keys(dead: App) -> None:
    url = dead.store_url
    assert "nothing to purge" in run("dlq", "purge", "--older-than", "30d", "--store", url).output
    refused = run("dlq", "purge", "--older-than", "0s", "--store", url)
    assert refused.exit_code == 1 and "refusing to permanently delete 3 dead job(s)" in refused.output
    assert "3 dead job(s) older than 0s would be deleted" in run("dlq", "purge", "--older-than", "0s",
                                                                  "--dry-run", "--store", url).output
    done = run("dlq", "purge", "--older-than", "0s", "--yes", "--store", url)
    assert done.exit_code == 0 and "purged 3 dead job(s)" in done.output
    assert json.loads(run("jobs", "--json", "--store", url).stdout) == []
    assert run("dlq", "purge", "--older-than", "soon", "--store", url).exit_code == 2
