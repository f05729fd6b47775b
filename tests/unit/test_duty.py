"""A worker's background duty (firesafe/retries/duty.py): rounds in a thread of their own, a store
fault backed off and logged on one line, a bug logged with its traceback, neither stopping it."""

from __future__ import annotations

import logging
import threading

import pytest

from firesafe.errors import StoreError
from firesafe.retries.duty import Duty


class Scripted(Duty):
    """Each round takes the next outcome: a number (the wait it returns) or an exception to raise.
    Once the script is done it signals ``finished`` and waits for the stop."""

    name = "scripted"
    fault_base = 0.01
    fault_cap = 0.02

    def __init__(self, script: list[object], first: float = 0.0) -> None:
        super().__init__()
        self.script = list(script)
        self.rounds = 0
        self.released_calls = 0
        self.first = first
        self.finished = threading.Event()

    def first_wait(self) -> float:
        return self.first

    def round(self) -> float:
        self.rounds += 1
        if not self.script:
            self.finished.set()
            return 60.0
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        assert isinstance(step, float)
        return step

    def after_bug(self) -> float:
        return 0.0

    def released(self) -> None:
        self.released_calls += 1


def test_faults_and_bugs_are_logged_and_the_duty_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    duty = Scripted([StoreError("database is locked"), StoreError("still locked"), 0.0,
                     ValueError("a bug in the round"), 0.0])
    with caplog.at_level(logging.ERROR, logger="firesafe.worker"):
        duty.start()
        assert duty.finished.wait(10)
        duty.stop()
    assert duty.rounds == 6 and duty.released_calls == 1
    faults = [r.getMessage() for r in caplog.records if "store fault" in r.getMessage()]
    assert len(faults) == 2 and faults[0].startswith("scripted: store fault (database is locked); retrying in ")
    bugs = [r for r in caplog.records if r.getMessage() == "scripted failed"]
    assert len(bugs) == 1 and bugs[0].exc_info is not None and "a bug in the round" in str(bugs[0].exc_info[1])
    assert not duty._thread.is_alive()


def test_a_stop_during_the_first_wait_runs_no_round_and_still_releases() -> None:
    duty = Scripted([0.0], first=60.0)
    duty.start()
    duty.stop(timeout=5.0)
    assert duty.rounds == 0 and duty.released_calls == 1 and not duty._thread.is_alive()


def test_the_thread_is_named_after_the_duty() -> None:
    assert Scripted([])._thread.name == "firesafe-scripted"
