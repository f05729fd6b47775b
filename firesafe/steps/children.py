"""Child jobs, recorded like steps: a spawn runs once per (job, step name), a wait gives the worker back.

:func:`spawn` inserts the children and records their keys as the step's result, so a retry, a
rescue, a rerun or a replay of the parent restores the keys instead of spawning again; the keys are
derived from the parent's key and the step's name, so even a spawn whose record was lost (the
process died between the insert and the record) finds its children already stored and adds none.
:func:`wait` parks the parent (a deferral, no attempt used) until the store's count of its children
not yet ended reaches 0, then hands back their results.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from firesafe.errors import InvalidInput, Permanent, WaitingForChildren
from firesafe.idempotency.keys import step_key
from firesafe.states import FINISHED, State
from firesafe.steps.steps import LeaseLost, Steps

if TYPE_CHECKING:
    from firesafe.models import Job
    from firesafe.store.base import InsertParams

#: The longest a parent parks at a time when its wait has no deadline; the store wakes it sooner when
#: its children end (this is the safety net, each park a deferral of the job's budget).
PARK_MAX = 86400.0
#: How wait steps are named in the step records (a replay of the parent forgets them: see
#: store/sql/*/children.sql, step_delete_waits).
WAIT_PREFIX = "wait-children:"
#: The step that records which children a wait for some of them (``at_least``) saw ended.
ENDED_SUFFIX = ":ended"
#: How many children an error message names.
NAMED = 10
#: How much of each child's error an error message quotes.
ERROR_CUT = 120

OnDead = Literal["fail", "collect"]


class ChildrenFailed(Permanent):
    """Children the job waited for with ``on_dead="fail"`` died or were cancelled."""

    def __init__(self, message: str, keys: Sequence[str]) -> None:
        super().__init__(message)
        self.keys = list(keys)


class ChildrenTimedOut(Permanent):
    """The wait's ``timeout`` passed before every child ended."""


def child_key(parent_key: str, step: str, index: int) -> str:
    """The key of the ``index``-th child a spawn step makes when none is given: stable across the
    parent's attempts, at most 255 characters (shortened with a digest when longer).

    >>> child_key("order:7", "spawn-0", 3)
    'order:7/spawn-0/3'
    >>> len(child_key("k" * 250, "spawn-0", 3))
    255
    """
    return step_key(step_key(parent_key, step), str(index))


def spawn(steps: Steps, name: str, parent_key: str, build: Callable[[Callable[[int], str]], list[InsertParams]]
          ) -> list[str]:
    """Insert the children that ``build`` describes (given the default key of each by its index) as
    one bulk insert, at most once per (job, ``name``); returns their keys in order."""
    name, position, rec = steps._begin(name)
    if rec is not None:
        steps.log.append({"name": name, "status": "restored"})
        return [str(k) for k in json.loads(rec.result or "[]")]
    try:
        params = build(lambda i: child_key(parent_key, name, i))
        jobs = steps._store.job_spawn_many(steps._job_id, steps._token, params, step=name)
    except Exception as exc:
        steps._failed(name, exc)
        raise
    if jobs is None:
        raise LeaseLost(f"spawn {name!r} came after this attempt lost its lease; nothing was spawned")
    keys = [j.key for j in jobs]
    steps._record(name, position, keys)
    steps.log[-1].update(status="spawned", children=len(keys))
    return keys


def wait(steps: Steps, name: str, keys: Sequence[str], timeout: float | None, on_dead: OnDead) -> list[Any]:
    """The results of the children ``keys`` once all have ended (see ``Context.wait_children``);
    until then the job is parked without a worker and woken by the store."""
    name, position, rec = steps._begin(name)
    store = steps._store
    now = store.now()
    deadline = now + timeout if timeout is not None else None
    if rec is not None:
        deadline = json.loads(rec.result or "{}").get("deadline")
    if _any_waiting(store, steps._job_id, keys):
        jobs: dict[str, Job] = {}
        waiting = list(keys)
    else:  # every child ended: read them, once
        jobs = _children(store, keys)
        waiting = [k for k in keys if jobs[k].state not in FINISHED]
    if rec is None:
        steps._record(name, position, {"deadline": deadline, "children": len(keys)})
    else:
        steps.log.append({"name": name, "status": "restored"})
    if waiting:
        if deadline is not None and now >= deadline:
            steps.log[-1]["status"] = "timed_out"
            jobs = jobs or _children(store, keys)
            waiting = [k for k in keys if jobs[k].state not in FINISHED]
            raise ChildrenTimedOut(f"wait {name!r} timed out with {len(waiting)} of {len(keys)} children not "
                                   f"ended: {_named(waiting)}")
        steps.log[-1]["status"] = "waiting"
        raise WaitingForChildren(_park_for(deadline, now),
                                 reason=f"waiting for children of {name!r} ({len(keys)} in all)")
    steps.log[-1].update(status="done", children=len(keys))
    outcomes = _outcomes(jobs, keys, on_dead, "children")
    return [outcomes[k] if on_dead == "fail" else {"key": k, **outcomes[k]} for k in keys]


def wait_some(steps: Steps, name: str, keys: Sequence[str], at_least: int, timeout: float | None,
              on_dead: OnDead) -> dict[str, Any]:
    """The children of ``keys`` that have ended once at least ``at_least`` of them have (see
    ``Context.wait_any``), by key in the order of ``keys``; until then the job is parked without a
    worker, and the store wakes it when its count of children not ended reaches the mark this wait
    set. Which children had ended is recorded as a step (``<name>:ended``), so every later run gets
    the same answer."""
    name, position, rec = steps._begin(name)
    store = steps._store
    now = store.now()
    deadline = now + timeout if timeout is not None else None
    if rec is None:
        steps._record(name, position, {"deadline": deadline, "children": len(keys), "at_least": at_least})
    else:
        deadline = json.loads(rec.result or "{}").get("deadline")
        steps.log.append({"name": name, "status": "restored"})
    got_name, got_position, got = steps._begin(name + ENDED_SUFFIX)
    if got is not None:
        ended = [str(k) for k in json.loads(got.result or "[]")]
        _wake_at_all(steps)  # a wait of an earlier run may have left its own mark (a rerun keeps it)
        steps.log.append({"name": got_name, "status": "restored"})
        jobs = _children(store, ended)
    else:
        count = store.job_children_wait(steps._job_id, steps._token, keys, at_least)
        if count is None:
            raise LeaseLost(f"wait {name!r} came after this attempt lost its lease")
        if count < at_least:
            if deadline is not None and now >= deadline:
                _wake_at_all(steps)
                steps.log[-1]["status"] = "timed_out"
                raise ChildrenTimedOut(f"wait {name!r} timed out with {count} of {len(keys)} children ended "
                                       f"({at_least} wanted)")
            steps.log[-1]["status"] = "waiting"
            raise WaitingForChildren(_park_for(deadline, now),
                                     reason=f"waiting for {at_least} of {len(keys)} children of {name!r}")
        jobs = _children(store, keys)
        ended = [k for k in keys if jobs[k].state in FINISHED]  # enough: the count above set the mark to 0
        steps._record(got_name, got_position, ended)
        steps.log[-1].update(status="done", children=len(ended))
    return _outcomes(jobs, ended, on_dead, "children ended")


def _park_for(deadline: float | None, now: float) -> float:
    """How long a waiting parent parks: until its deadline, at most PARK_MAX (the store wakes it sooner)."""
    return PARK_MAX if deadline is None else max(0.0, min(PARK_MAX, deadline - now))


def _outcomes(jobs: dict[str, Job], keys: Sequence[str], on_dead: OnDead, what: str) -> dict[str, Any]:
    """The failure policy of a wait, by key: with ``on_dead="fail"`` each child's result, or
    ChildrenFailed naming those that did not succeed; with ``"collect"``, each one's state, result
    and error."""
    failed = [k for k in keys if jobs[k].state != State.SUCCEEDED]
    if failed and on_dead == "fail":
        raise ChildrenFailed(f"{len(failed)} of {len(keys)} {what} did not succeed: "
                             + _named([f"{k} ({_how(jobs[k])})" for k in failed]), failed)
    if on_dead == "fail":
        return {k: jobs[k].result for k in keys}
    return {k: {"state": str(jobs[k].state), "result": jobs[k].result,
                "error": None if jobs[k].state == State.SUCCEEDED else _how(jobs[k])} for k in keys}


def _wake_at_all(steps: Steps) -> None:
    """Back to waking the job when all its children ended (what a later wait for all expects)."""
    if steps._store.job_children_wait(steps._job_id, steps._token, [], 0) is None:
        raise LeaseLost("a wait for children came after this attempt lost its lease")


def _any_waiting(store: Any, job_id: int, keys: Sequence[str]) -> bool:
    """Whether some of ``keys`` have not ended, without reading them: the job's count of children not
    ended is 0 (none has), or the children of ``keys`` that ended are counted (a wait on some of the
    job's children while others run)."""
    from firesafe.store.base import JobFilter

    me = store.job_get_by_id(job_id)
    if me is None or me.children_pending <= 0:
        return False
    ended = 0
    for start in range(0, len(keys), 5000):
        part = list(keys[start:start + 5000])
        ended += sum(store.job_count(JobFilter(keys=part, state=str(s))) for s in FINISHED)
    return ended < len(keys)


def _children(store: Any, keys: Sequence[str]) -> dict[str, Job]:
    found: dict[str, Job] = store.job_outcomes(keys)
    missing = [k for k in keys if k not in found]
    if missing:  # pruned since they ended: their reserved keys' records keep how they ended
        kept = store.reserved_get(missing)
        lost = [k for k in missing if k not in kept or kept[k].result_digest is not None]
        if lost:
            raise InvalidInput(f"the wait's children are not all stored (never spawned, or pruned with a result "
                               f"too long to keep): {_named(lost)}")
        found.update(kept)
    return found


def _how(job: Job) -> str:
    """How a child that did not succeed ended, on one line, its error cut at :data:`ERROR_CUT`
    characters (so that a message naming several keeps every name): ``dead: ValueError: bad row``."""
    error = job.last_error if job.state == State.DEAD else job.reason
    if error and len(error) > ERROR_CUT:
        error = error[:ERROR_CUT] + "..."
    return f"{job.state}: {error}" if error else str(job.state)


def _named(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def family(store: Any, job: Job, per_state: int = 10) -> dict[str, Any] | None:
    """A job's parent and children, for ``firesafe show`` and the dashboard (None: it has neither).

    ``{"parent": {"key", "name", "state"} | {"id", "gone": True} | None, "children": {"total",
    "pending", "by_state": {state: count}, "keys": {state: [up to per_state keys, in spawn order]}}}``
    """
    counts = store.job_children_counts(job.id)
    if job.parent_id is None and not counts:
        return None
    parent: dict[str, Any] | None = None
    if job.parent_id is not None:
        p = store.job_get_by_id(job.parent_id)
        parent = ({"id": job.parent_id, "gone": True} if p is None
                  else {"key": p.key, "name": p.name, "state": str(p.state)})
    order = [str(s) for s in State]
    keys = {state: [c.key for c in store.job_children(job.id, state=state, limit=per_state)]
            for state in sorted(counts, key=order.index)}
    return {"parent": parent, "children": {"total": sum(counts.values()), "pending": job.children_pending,
                                           "by_state": {s: counts[s] for s in keys}, "keys": keys}}


def check_on_dead(on_dead: object) -> OnDead:
    if on_dead not in ("fail", "collect"):
        raise InvalidInput(f'on_dead must be "fail" or "collect", not {on_dead!r}')
    return on_dead


__all__ = ["ENDED_SUFFIX", "PARK_MAX", "WAIT_PREFIX", "ChildrenFailed", "ChildrenTimedOut", "child_key", "family",
           "spawn", "wait", "wait_some"]
