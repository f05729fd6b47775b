"""Faults on purpose: the named points where drills strike, and a store that fails when told to.

The points, in the order an attempt meets them:

``after_claim``
    The job is claimed (its lease is held) and nothing of it has run yet.
``in_step``
    Inside a step, before its effect.
``after_effect``
    Inside a step, after its effect happened and before the step is recorded: the one window a
    recorder cannot close; only a provider that deduplicates by ``ctx.idempotency_key`` closes it.
``before_complete``
    The attempt has ended and its outcome is not saved yet.
``heartbeat``
    The worker misses its heartbeats (a long pause) while the attempt runs: its lease expires.
``store``
    A store call fails with :class:`~firesafe.errors.StoreError`, either before it reaches the
    store or after it committed (the caller is told it failed although it happened).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from firesafe.errors import StoreError

POINTS = ("after_claim", "in_step", "after_effect", "before_complete", "heartbeat", "store")

#: The store methods workers and jobs call that a ``store`` fault may hit.
FAULTABLE = frozenset({
    "job_claim", "job_finish_many", "job_finish_and_claim", "job_heartbeat_many", "job_list_expired",
    "job_rescue_many", "step_list", "step_record", "worker_beat", "signal_get", "signal_send", "job_spawn_many",
})
#: Store methods that may move a job from one state to another.
MOVES = frozenset({
    "job_insert_many", "job_spawn_many", "job_claim", "job_finish_many", "job_finish_and_claim", "job_rescue_many",
    "job_replay_many", "job_discard_many", "job_cancel", "job_rerun", "job_delete_finished",
})


class InjectedStoreError(StoreError):
    """A store fault injected by a drill (never raised by a real store)."""


class FaultyStore:
    """A store that behaves like ``inner`` except where ``decide`` says a call fails.

    ``decide(method)`` returns ``"before"`` (the call fails without reaching the store), ``"after"``
    (the call runs and commits, then the caller gets an error) or None. ``moved(method)`` is called
    after every call that may move jobs between states, whether it succeeded, failed or was told
    it failed, so a checker can look at the states that are really stored. It is not called when
    the call failed in the store (its transaction rolled back) or reports that it moved nothing
    (an empty claim, finishes that were all fenced).
    """

    def __init__(self, inner: Any, decide: Callable[[str], str | None],
                 moved: Callable[[str], None] | None = None) -> None:
        self._inner = inner
        self._decide = decide
        self._moved = moved

    def __repr__(self) -> str:
        return f"<FaultyStore over {self._inner!r}>"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or (name not in FAULTABLE and name not in MOVES):
            return attr
        decide, moved = self._decide, self._moved

        def call(*args: Any, **kwargs: Any) -> Any:
            when = decide(name) if name in FAULTABLE else None
            if when == "before":
                raise InjectedStoreError(f"injected store fault before {name}")
            out = attr(*args, **kwargs)
            if moved is not None and name in MOVES and _moved_any(out):
                moved(name)
            if when == "after":
                raise InjectedStoreError(f"injected store fault after {name} (it committed)")
            return out

        call.__name__ = name
        self.__dict__[name] = call  # built once per method
        return call


def _moved_any(out: Any) -> bool:
    """Whether a store call's answer says it may have moved a job (an empty list or all False: no)."""
    if isinstance(out, tuple):  # job_finish_and_claim: (applied, claimed)
        return any(_moved_any(part) for part in out)
    if isinstance(out, list):
        return any(out)
    return True
