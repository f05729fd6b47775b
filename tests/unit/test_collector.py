"""The worker's settings for Python's garbage collector (firesafe/worker/collector.py)."""

from __future__ import annotations

import gc
import threading

import pytest

from firesafe import App
from firesafe.worker import collector


@pytest.fixture(autouse=True)
def _collector_as_found():
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    gc.unfreeze()


def test_a_worker_raises_the_first_threshold_and_freezes_then_puts_both_back() -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    with collector.tuned():
        assert gc.get_threshold() == (collector.FIRST_THRESHOLD, 10, 10)
        assert gc.get_freeze_count() > 0
        with collector.tuned():  # a second claim loop of the process
            assert gc.get_threshold()[0] == collector.FIRST_THRESHOLD
        assert gc.get_threshold()[0] == collector.FIRST_THRESHOLD  # the first one still runs
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_higher_threshold_a_collector_turned_off_and_someone_elses_freeze_are_left_alone() -> None:
    gc.set_threshold(50_000, 20, 5)
    with collector.tuned():
        assert gc.get_threshold() == (50_000, 20, 5)
    gc.set_threshold(0)  # off by threshold
    with collector.tuned():
        assert gc.get_threshold()[0] == 0
    gc.set_threshold(700, 10, 10)
    gc.freeze()  # a pre-fork server froze its objects before the worker started
    with collector.tuned():
        assert gc.get_threshold()[0] == collector.FIRST_THRESHOLD
    assert gc.get_freeze_count() > 0  # the worker did not unfreeze what it had not frozen


def test_the_settings_hold_while_a_worker_runs_and_are_restored_when_it_returns(tmp_path) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    app = App(f"sqlite:///{tmp_path / 'gc.db'}")
    seen: list[tuple[int, int, int]] = []

    @app.job
    def look(ctx) -> None:
        seen.append(gc.get_threshold())

    look.enqueue()
    app.work(burst=True)
    assert seen == [(collector.FIRST_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10) and gc.get_freeze_count() == 0
    app.close()


def test_cycles_are_still_collected_while_a_worker_runs() -> None:
    gone = threading.Event()

    class Node:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            gone.set()

    with collector.tuned():
        Node()
        assert not gone.is_set()  # a cycle: reference counting alone does not free it
        gc.collect()
        assert gone.is_set()
