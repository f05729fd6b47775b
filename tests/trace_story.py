"""A job whose trace mixes failed attempts and limiter waits, for the tests of how a trace reads
(`firesafe show`, `--json`, the dashboard's job page).

The story, on the store's (fake) clock: ``pay`` fails twice with an ``HTTPStatusError`` whose message
has a newline, then the limiter ``psp`` is paused three times in a row, so the job is held back three
times (a wait each), and then it runs and succeeds: 6 runs, 3 attempts, 3 waits of
``WAITED`` seconds in all.
"""

from __future__ import annotations

from firesafe import App, Backoff, FakeClock

KEY = "pay:o-1"
ERROR = "500 Internal Server Error\nfrom psp"
#: The clock's advance between each wait and the next claim of the job.
GAPS = (21.0, 31.0, 31.0)
WAITED = sum(GAPS)


class HTTPStatusError(Exception):
    """A provider's error, named as httpx names it."""


def held_back_app(store_url: str, clock: FakeClock, *, finish: bool = True) -> App:
    """The app after the story; with ``finish=False`` it stops while the job waits its third time."""
    app = App(store_url, clock=clock)
    app.limiter("psp", rate=100, burst=100)
    runs: list[str] = []

    @app.job(limiter="psp", max_attempts=5, backoff=Backoff(base=10.0, cap=10.0, jitter="none"))
    def pay(ctx, order_id: str) -> dict:
        runs.append(order_id)
        if len(runs) <= 2:
            raise HTTPStatusError(ERROR)
        return {"paid": order_id}

    pay.enqueue("o-1", key=KEY)
    app.work(burst=True)  # failed attempt 1
    clock.advance(10.0)
    app.work(burst=True)  # failed attempt 2
    psp = app.limiters["psp"]
    psp.pause(30.0, reason="provider asked")
    clock.advance(10.0)
    app.work(burst=True)  # wait 1: paused
    for gap in GAPS[:2]:
        clock.advance(gap)
        psp.pause(30.0, reason="provider asked again")
        app.work(burst=True)  # waits 2 and 3
    assert len(runs) == 2, runs
    if finish:
        clock.advance(GAPS[2])
        app.work(burst=True)  # the pause is over: it runs and succeeds
        assert len(runs) == 3, runs
    return app
