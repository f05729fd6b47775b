"""The app that ``firesafe worker tests.limits.cli_app:app`` runs in the limiter tests (the CLI as a
user runs it), configured from the environment:

- ``FIRESAFE_TEST_STORE``, ``FIRESAFE_TEST_PROVIDER``: the store URL and the provider's URL;
- ``FIRESAFE_TEST_RATE``, ``FIRESAFE_TEST_BURST``: the limiter ``provider``;
- ``FIRESAFE_TEST_HOLD=FOLDER`` and ``FIRESAFE_TEST_HOLD_QUEUE=Q``: the worker serving queue ``Q``
  stalls once right after it was granted tokens, as a process the OS does not run for a while
  does: it writes ``FOLDER/held`` (how many jobs it was granted) and goes on only once
  ``FOLDER/release`` exists; with ``FIRESAFE_TEST_HOLD_SKIP=N``, after its grant number N + 1.
  The test decides when the stall ends, so the late start it causes happens at a known moment (a
  real stall comes at any moment, and is rarely caught).

Jobs: ``call_a`` on queue ``a`` and ``call_b`` on queue ``b``, both under ``provider``, each one
GET of ``PROVIDER/call?key=KEY``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from firesafe import App
from tests.limits.procs import FAST, _client, call


def build(store_url: str, provider: str, rate: float, burst: float) -> App:
    made = App(store_url, lease=10.0)
    made.limiter("provider", rate=rate, burst=burst)

    @made.job(name="call_a", queue="a", limiter="provider", max_attempts=3, backoff=FAST)
    def call_a(ctx: Any) -> int:
        return call("httpx", f"{provider}/call?key={ctx.job.key}")

    @made.job(name="call_b", queue="b", limiter="provider", max_attempts=3, backoff=FAST)
    def call_b(ctx: Any) -> int:
        return call("httpx", f"{provider}/call?key={ctx.job.key}")

    return made


def _hold_once_after_grants(folder: Path, queue: str, skip: int) -> None:
    from firesafe.limits.gate import Gate

    admit = Gate.admit
    done: list[bool] = []

    def admit_then_stall(self: Gate, claimed: list[Any]) -> Any:
        admission = admit(self, claimed)
        granted = [c for c in admission.start if c.job.name in self.job_limiters]
        if granted and len(done) <= skip and queue in self.worker.queues:
            done.append(True)
            if len(done) <= skip:
                return admission
            (folder / "held").write_text(str(len(granted)))
            deadline = time.monotonic() + 30
            while not (folder / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.002)
        return admission

    Gate.admit = admit_then_stall  # type: ignore[method-assign]


if "FIRESAFE_TEST_STORE" in os.environ:
    app = build(os.environ["FIRESAFE_TEST_STORE"], os.environ["FIRESAFE_TEST_PROVIDER"],
                float(os.environ.get("FIRESAFE_TEST_RATE", "20")), float(os.environ.get("FIRESAFE_TEST_BURST", "5")))
    _client("httpx")  # made before the first claim: its cost must not delay granted calls
    if os.environ.get("FIRESAFE_TEST_HOLD"):
        _hold_once_after_grants(Path(os.environ["FIRESAFE_TEST_HOLD"]), os.environ.get("FIRESAFE_TEST_HOLD_QUEUE", "a"),
                                int(os.environ.get("FIRESAFE_TEST_HOLD_SKIP", "0")))
