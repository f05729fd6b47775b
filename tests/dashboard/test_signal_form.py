"""The job page of a job waiting for a signal, in a real browser: its approve / reject form sends the
signal (as the dashboard's user, under the CSRF rules of every action) and the job runs with the
decision. Both stores."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from firesafe import App, State
from firesafe.dashboard import create_app
from firesafe.dashboard.server import BackgroundServer

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture
def waiting(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.job()
    def refund(ctx, order: str, amount: int) -> object:
        decision = ctx.wait_for_signal("approval", timeout=86400)
        return {"order": order, "refunded": amount if decision["approved"] else 0, "note": decision["note"]}

    refund.enqueue("o-91", 1200, key="refund:o-91")
    refund.enqueue("o-92", 900, key="refund:o-92")
    app.work(burst=True)
    assert app.get("refund:o-91").state == State.SCHEDULED
    yield app
    app.close()


def job_url(base: str, key: str) -> str:
    return f"{base}/job?key={quote(key, safe='')}"


def test_approve_and_reject_forms_send_the_signal_and_the_jobs_run_with_it(waiting: App, page: Any) -> None:
    app = waiting
    with BackgroundServer(create_app(app)) as server:
        page.goto(job_url(server.url, "refund:o-91"))
        form = page.locator("form.signal-form")
        assert form.count() == 1 and "Waiting for the signal approval" in form.inner_text()
        form.locator("input[name=note]").fill("order returned, ok " + XSS)
        with page.expect_navigation():
            form.locator("button.approve-button").click()
        assert page.url == job_url(server.url, "refund:o-91")  # back on the job page (303 after the POST)
        assert page.locator("form.signal-form").count() == 0  # answered: no form any more
        signals = page.inner_text("#signals")
        assert "approval" in signals and "dashboard@127.0.0.1" in signals and '"approved": true' in signals
        assert "<script>" in signals and page.evaluate("window.__pwned") is None  # the note is shown as text
        assert "signal_sent" in page.inner_text("#events")

        page.goto(job_url(server.url, "refund:o-92"))
        page.locator("form.signal-form input[name=note]").fill("above the limit")
        with page.expect_navigation():
            page.locator("form.signal-form button.reject-button").click()

    approved, rejected = app.signals("refund:o-91"), app.signals("refund:o-92")
    assert [(s.actor, s.value(), s.reason) for s in approved] == [
        ("dashboard@127.0.0.1", {"approved": True, "note": "order returned, ok " + XSS}, "order returned, ok " + XSS)]
    assert [s.value() for s in rejected] == [{"approved": False, "note": "above the limit"}]
    assert app.get("refund:o-91").run_at.timestamp() <= app.store.now()  # woken: due now
    app.work(burst=True)
    assert app.get("refund:o-91").result == {"order": "o-91", "refunded": 1200, "note": "order returned, ok " + XSS}
    assert app.get("refund:o-92").result == {"order": "o-92", "refunded": 0, "note": "above the limit"}


def test_the_signal_form_keeps_the_dashboards_csrf_rule(waiting: App, page: Any) -> None:
    app = waiting
    with BackgroundServer(create_app(app)) as server:
        page.goto(job_url(server.url, "refund:o-91"))  # the browser has the dashboard's cookie
        target = server.url + "/job/signal"
        body = "key=refund%3Ao-91&signal=approval&decision=approve&note=sneaky"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        refused = page.request.post(target, data=body, headers=headers, max_redirects=0)
        assert refused.status == 403 and "CSRF" in refused.text()
        csrf = page.locator("form.signal-form input[name=csrf]").get_attribute("value")
        bad = page.request.post(target, data=f"csrf={csrf}&key=refund%3Ao-91&signal=approval&decision=maybe",
                                headers=headers, max_redirects=0)
        assert bad.status == 400 and "decision must be approve or reject" in bad.text()
    assert app.signals("refund:o-91") == []
