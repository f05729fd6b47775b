"""examples/digest: the digest missed while the workers were down is sent once, despite a failed send."""

from __future__ import annotations

from pathlib import Path

from firesafe import App
from tests.examples.runner import run_example

MISSED = "daily_digest@2026-12-01T08:00:00+01:00"


def test_the_missed_digest_is_sent_exactly_once(tmp_path: Path) -> None:
    data = tmp_path / "digest"
    run_example("digest", data)
    mailbox = [line.split("\t") for line in (data / "mailbox.txt").read_text().splitlines()]
    assert [subject for _, subject in mailbox] == ["Shop digest for 2026-11-30", "Shop digest for 2026-12-01"]
    assert len({message_id for message_id, _ in mailbox}) == 2

    app = App(f"sqlite:///{data}/firesafe.db")
    assert sorted(j.key for j in app.jobs_list(job="daily_digest")) == [
        "daily_digest@2026-11-30T08:00:00+01:00", MISSED]
    job = app.get(MISSED)
    assert [(a.outcome, a.error_type) for a in job.trace] == [("failed", "TimeoutError"), ("succeeded", None)]
    assert [s["status"] for s in job.trace[1].detail["steps"]] == ["restored", "ran"]
    assert job.result["relay"] == "duplicate: already delivered, dropped"
    assert job.result["message_id"] == f"<{MISSED}/send@shop.example>"
    app.close()
