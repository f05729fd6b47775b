"""Alerts people can tune: a policy per job and per error class, routing by severity, samples that
cover every error group, attempts apart from waits, stuck queues that name themselves.

Given a real store (both dialects where the store is involved) and real HTTP receivers on 127.0.0.1,
when jobs die under a policy, then each receiver gets exactly the alerts routed to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from firesafe import App, Backoff, ConfigError, FakeClock, Permanent
from firesafe.alerts import AlertPolicy, Log, Webhook
from firesafe.alerts.grouping import SEVERITIES
from firesafe.alerts.policy import MUTE, Verdict, check_routing, route_severity, verdict
from firesafe.alerts.render import MAX_SAMPLES, tally
from firesafe.cli.main import cli
from tests.alerts.receiver import Receiver

NO_WAIT = Backoff(base=0.0, cap=0.0, jitter="none")


class CardDeclined(Permanent):
    """A business outcome: the card was declined. Nothing is broken."""


class HTTPStatusError(Exception):
    pass


# -- the decisions, pure ---------------------------------------------------------------------------
def test_an_error_class_wins_over_the_jobs_own_severity_and_muting() -> None:
    policy = AlertPolicy(severity="warning", mute=True, errors={OSError: "critical", CardDeclined: "info"})
    assert policy.decide("OSError", "exhausted") == Verdict("critical", False)
    assert policy.decide("CardDeclined", "permanent") == Verdict("info", False)
    assert policy.decide("KeyError", "exhausted") == Verdict("warning", True)  # the job's own: muted


def test_permanent_matches_every_failure_given_up_on_purpose() -> None:
    policy = AlertPolicy(errors={Permanent: MUTE})
    assert policy.decide("CardDeclined", "permanent").muted
    assert not policy.decide("CardDeclined", "exhausted").muted, "a Permanent never retried ends 'permanent'"


def test_a_policy_applies_to_its_jobs_dead_letters_and_failure_rate_only() -> None:
    muted = AlertPolicy(mute=True)
    assert verdict("dead_letter", {"error_type": "X"}, muted).muted
    assert verdict("failure_rate", {}, muted) == Verdict("warning", True)
    assert verdict("queue_stuck", {}, muted) == Verdict("critical", False)
    assert verdict("dead_letter", {"error_type": "X"}, None) == Verdict("critical", False), "the default"


@given(st.sampled_from(SEVERITIES), st.booleans(),
       st.dictionaries(st.sampled_from(["KeyError", "OSError", "CardDeclined", "Permanent"]),
                       st.sampled_from([*SEVERITIES, MUTE]), max_size=4),
       st.sampled_from(["KeyError", "OSError", "CardDeclined", "ValueError", None]),
       st.sampled_from(["exhausted", "permanent", "worker_lost", None]))
def test_every_dead_letter_gets_one_known_severity_and_its_class_decides_first(
        severity: str, mute: bool, errors: dict[str, str], error_type: str | None, reason: str | None) -> None:
    v = AlertPolicy(severity=severity, mute=mute, errors=errors).decide(error_type, reason)
    assert v.severity in SEVERITIES
    chosen = errors.get(error_type or "") or (errors.get("Permanent") if reason == "permanent" else None)
    if chosen is None:
        assert v == Verdict(severity, mute)
    elif chosen == MUTE:
        assert v.muted
    else:
        assert v == Verdict(chosen, False)


def test_routing_by_severity_and_resolutions_follow_what_they_resolve() -> None:
    assert check_routing(None, "warning", "Slack") == {"critical", "warning"}
    assert check_routing(("critical",), None, "Webhook") == {"critical"}
    assert route_severity("failure_rate_resolved", "info") == "warning"
    pager = Log(severities=("critical",))
    assert pager.accepts("queue_stuck_resolved", "info"), "the pager that got the page gets its end"
    assert not pager.accepts("dead_letter", "warning") and pager.accepts("test", "info")


def test_a_schedule_takes_an_alert_policy_as_a_job_does(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path}/s.db")

    @app.schedule("0 2 * * *", alert=AlertPolicy(severity="warning", errors={"Declined": "mute"}))
    def nightly(ctx: Any, window: Any) -> None: ...

    assert app.jobs["nightly"].alert.decide("TimeoutError", "exhausted") == Verdict("warning", False)
    assert app.jobs["nightly"].alert.decide("Declined", "permanent").muted
    with pytest.raises(ConfigError, match="alert= takes"):
        app.schedule("0 3 * * *", name="other", alert="loud")(lambda ctx, window: None)


def test_bad_policies_and_routes_are_clear_errors(tmp_path: Path) -> None:
    for make, says in ((lambda: AlertPolicy(severity="page"), "severity must be one of"),
                       (lambda: AlertPolicy(errors={OSError: "loud"}), "the verdict of OSError"),
                       (lambda: AlertPolicy(errors={42: "info"}), "maps exception classes"),
                       (lambda: Log(severities=("critical",), min_severity="info"), "not both"),
                       (lambda: Log(min_severity="urgent"), "min_severity must be one of"),
                       (lambda: Log(severities=()), "would send nothing")):
        with pytest.raises(ConfigError, match=says):
            make()
    app = App(f"sqlite:///{tmp_path}/p.db")
    with pytest.raises(ConfigError, match="alert= takes an AlertPolicy"):
        app.job(name="refund", alert="loud")(lambda ctx: None)
    assert "refund" not in app.jobs
    app.close()


# -- the policy at work, both stores -----------------------------------------------------------
@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    warn, page = Receiver().up(), Receiver().up()
    yield warn, page
    warn.close()
    page.close()


def shop(url: str, sinks: list[Any]) -> App:
    app = App(url, alerts=sinks)
    app.alert_rules(dispatch=False, failure_rate=None, stuck_after=None)  # the test dispatches by hand

    @app.job(max_attempts=1, alert=AlertPolicy(errors={TimeoutError: "warning", CardDeclined: MUTE}))
    def charge(ctx, order: str, outcome: str) -> None:
        if outcome == "timeout":
            raise TimeoutError(f"the provider did not answer for {order}")
        if outcome == "declined":
            raise CardDeclined(f"card of {order} declined")
        raise ConnectionError(f"the provider is down ({order})")

    return app


def documents(r: Receiver) -> list[dict[str, Any]]:
    assert all(g.valid for g in r.got)
    return [g.json for g in r.got]


def test_a_warning_reaches_the_warning_sink_and_not_the_pager(store_url: str, receivers: tuple[Receiver, Receiver]
                                                               ) -> None:
    warn, page = receivers
    app = shop(store_url, [Webhook(warn.url, secret="test-secret", allow_private=True, name="slack",
                                   severities=("warning",)),
                           Webhook(page.url, secret="test-secret", allow_private=True, name="pager",
                                   min_severity="critical")])
    try:
        app.jobs["charge"].enqueue("o-1", "timeout", key="charge:o-1")
        app.work(burst=True)
        app.alerts.flush()
        [doc] = documents(warn)
        assert (doc["kind"], doc["severity"], doc["keys"]) == ("dead_letter", "warning", ["charge:o-1"])
        assert page.got == [], "the pager hears of no warning"
        # An outage of the same job is critical: it pages, and does not join the warning's alert.
        app.jobs["charge"].enqueue("o-2", "down", key="charge:o-2")
        app.work(burst=True)
        app.alerts.flush()
        [doc] = documents(page)
        assert (doc["severity"], doc["keys"]) == ("critical", ["charge:o-2"])
        assert len(warn.got) == 1
        [critical, warning] = app.alerts.list()
        assert [d.sink for d in critical.deliveries] == ["pager"] and [d.sink for d in warning.deliveries] == ["slack"]
    finally:
        app.close()


def test_a_muted_business_failure_is_recorded_but_pages_nobody(store_url: str, receivers: tuple[Receiver, Receiver]
                                                               ) -> None:
    _, page = receivers
    app = shop(store_url, [Webhook(page.url, secret="test-secret", allow_private=True, name="pager")])
    try:
        charge = app.jobs["charge"]
        charge.enqueue_many([{"args": [f"o-{i}", "declined"], "key": f"charge:o-{i}"} for i in range(30)])
        app.work(burst=True)
        app.alerts.flush()
        assert page.got == [], "thirty declined cards page nobody"
        [alert] = app.alerts.list()
        assert (alert.kind, alert.status, alert.count, alert.deliveries) == ("dead_letter", "muted", 30, [])
        assert alert.document["muted"] is True
        assert app.dlq.count(job="charge") == 30, "in the dead letters, to review"
        assert app.store.alert_waiting() == 0  # type: ignore[attr-defined]
        out = CliRunner().invoke(cli, ["alerts", "ls", "--store", store_url])
        assert out.exit_code == 0, out.output
        assert "muted: recorded, sent to no sink" in out.output
        listed = json.loads(CliRunner().invoke(cli, ["alerts", "ls", "--store", store_url, "--json"]).output)
        assert listed["alerts"][0]["status"] == "muted"
    finally:
        app.close()


def test_an_alert_shows_a_sample_job_of_every_error_group_it_counts(store_url: str) -> None:
    app = App(store_url, alerts=[Log()])
    app.alert_rules(dispatch=False, failure_rate=None, stuck_after=None)

    @app.job(max_attempts=1)
    def sync(ctx, n: int, error: str) -> None:
        raise {"KeyError": KeyError, "ValueError": ValueError, "OSError": OSError,
               "HTTPStatusError": HTTPStatusError}[error](f"record {n}")

    try:
        # Three jobs of three other errors die first, then seven of HTTPStatusError.
        for n, error in enumerate(["KeyError", "ValueError", "OSError"]):
            sync.enqueue(n, error, key=f"sync:{n}")
            app.work(burst=True, concurrency=1)
        sync.enqueue_many([{"args": [n, "HTTPStatusError"], "key": f"sync:{n}"} for n in range(3, 10)])
        app.work(burst=True)
        app.alerts.flush()
        [alert] = app.alerts.list()
        doc = alert.document
        assert doc["summary"]["errors"] == {"HTTPStatusError": 7, "KeyError": 1, "ValueError": 1, "OSError": 1}
        sampled = [job["error"].split(":")[0] for job in doc["jobs"]]
        assert set(sampled) == set(doc["summary"]["errors"]), "a sample job of every error group"
        assert sampled[0] == "HTTPStatusError", "the largest group first"
        assert len(doc["jobs"]) <= MAX_SAMPLES and doc["jobs_omitted"] == 10 - len(doc["jobs"])
    finally:
        app.close()


def test_the_attempt_list_holds_attempts_and_the_waits_are_counted_apart(
        store_url: str, receivers: tuple[Receiver, Receiver], caplog: pytest.LogCaptureFixture) -> None:
    warn, _ = receivers
    app = App(store_url, alerts=[Webhook(warn.url, secret="test-secret", allow_private=True), Log()])
    app.alert_rules(dispatch=False, failure_rate=None, stuck_after=None)
    psp = app.limiter("psp", rate=100)

    @app.job(max_attempts=2, backoff=NO_WAIT, limiter="psp")
    def refund(ctx, order: str) -> None:
        raise ConnectionError(f"refund of {order} refused")

    try:
        psp.pause(0.6)
        refund.enqueue("o-1", key="refund:o-1")
        app.work(burst=True, wait_scheduled=True)
        trace = app.get("refund:o-1").trace
        waits = [a for a in trace if a.is_wait]
        assert waits, "the paused limiter held the job at least once"
        with caplog.at_level("ERROR", logger="firesafe.alerts"):
            app.alerts.flush()
        [doc] = documents(warn)
        [job] = doc["jobs"]
        assert [a["outcome"] for a in job["attempts"]] == ["failed", "failed"], "waits are no attempts"
        assert job["attempt_count"] == 2 and job["waits"]["count"] == len(waits)
        assert job["waits"]["seconds"] > 0
        phrase = tally(2, job["waits"])
        assert phrase.startswith(f"2 attempts, {len(waits)} wait")
        assert phrase in caplog.text, "the log (and email) form says it too"
        assert "deferred" not in caplog.text
    finally:
        app.close()


def test_a_stuck_queue_alert_names_its_queue(store_url: str) -> None:
    clock = FakeClock()
    app = App(store_url, clock=clock, alerts=[Log()])
    app.alert_rules(dispatch=False, failure_rate=None, stuck_after=60)

    @app.job(queue="payments")
    def settle(ctx) -> None:
        pass

    try:
        settle.enqueue(key="settle:1")
        clock.advance(120)
        assert app.alerts.evaluate() == 1
        app.alerts.flush()
        [alert] = app.alerts.list()
        assert alert.kind == "queue_stuck" and alert.title == "queue payments stuck: no live worker"
        assert alert.document["queues"] == ["payments"]
        assert alert.document["details"][0]["queue"] == "payments"
    finally:
        app.close()
