"""The one path by which a worker's attempt outcomes reach the store.

A worker concludes attempts (the executor decides, firesafe/worker/executor.py) and hands the
outcomes to its :class:`Completer`. The completer writes them under their lease tokens, always
through :func:`~firesafe.worker.pipeline.transact`, and only once their transaction has committed
hands them back to the worker to account for (``book``: slots freed, counts, log lines, hooks).
Nothing is reported done before its commit, and no outcome is booked by any other route:

- **group commit**: a batch's outcomes wait in the outbox (:meth:`Completer.complete` with
  ``hold``) and leave with the next claim, in one transaction (:meth:`Completer.claim`:
  finish-and-claim), or on their own when the loop claims nothing (:meth:`Completer.send`);
- **at once**: outcomes that cannot wait for a claim (timeouts, jobs given back or released at
  shutdown, jobs that cannot run here, outcomes a store fault kept) are saved in a transaction of
  their own (:meth:`Completer.complete`);
- **in flight**: with a pipeline (firesafe/worker/pipeline.py) those transactions run on committer
  threads while the loop goes on; :meth:`Completer.collect` takes their replies in;
- **refused for data**: a batch the store refused for the data of one outcome (not for a fault of
  its own) is saved in halves down to that one outcome, which is saved escaped or, refused again,
  as unstorable (:meth:`Completer._save_apart`);
- **store faults**: the outcomes are kept (``unsaved``; their leases still held and heartbeated)
  and saved first by the next :meth:`Completer.retry`; one whose transaction did commit (only its
  answer was lost, as in a failover) is then found recorded for its attempt and booked once, not
  taken for a late worker's (:meth:`Completer._saved_before`);
- **given back to a limiter**: attempts the limiters' gate gives back are written by its report's
  transaction (the limiter's state and the job's in one commit) and booked here
  (:meth:`Completer.give_back`); what a store fault kept it from writing is kept here
  (:meth:`Completer.keep`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from firesafe.errors import StoreDataError, StoreError
from firesafe.store.base import Claimed, ClaimParams, FinishParams
from firesafe.worker import executor
from firesafe.worker.pipeline import Request, StorePipeline, transact

if TYPE_CHECKING:
    from firesafe.store.contract import Store

log = logging.getLogger("firesafe.worker")

#: Per outcome, the worker's bookkeeping of its attempt: ``(running attempt, attempt result)``.
Meta = list[tuple[Any, Any]]
#: Outcomes a store fault kept from being saved: ``(finishes, meta, keep_slots)``.
Unsaved = tuple[list[FinishParams], Meta | None, bool]
#: Accounts for saved outcomes: ``book(finishes, meta, applied, keep_slots)`` (see Worker._book).
Book = Callable[[list[FinishParams], Meta | None, list[bool], bool], None]


class Completer:
    """Saves the outcomes of one worker loop's attempts; used by that loop's thread only (the
    pipeline's committer threads run the transactions it hands them).

    Guarantee: every outcome handed to :meth:`complete` is written (under its lease token) and then
    booked exactly once, or kept in ``unsaved`` while the store fails; a refused outcome's data
    costs that outcome its text, never the batch beside it.
    """

    def __init__(self, store: Store, book: Book) -> None:
        self.store = store
        self._account = book
        #: Store transactions in flight (firesafe/worker/pipeline.py), or None: the loop runs each.
        self.pipe: StorePipeline | None = None
        #: Outcomes held for the next claim's transaction (group commit).
        self.outbox: tuple[list[FinishParams], Meta] | None = None
        #: Outcomes a store fault kept from being saved, oldest first.
        self.unsaved: list[Unsaved] = []
        #: A claim in the pipeline came back empty: no claim without outcomes goes out until the loop
        #: has waited (a poll interval, or a wake-up), as a loop waits after an empty claim of its own.
        self.dry = False

    # -- what is pending ---------------------------------------------------------------------------
    def in_flight(self) -> set[tuple[int, int]]:
        """The attempts whose outcomes are in the pipeline, by ``(job id, run)``."""
        if self.pipe is None:
            return set()
        return {(r.claimed.job.id, r.claimed.job.runs) for req in self.pipe.in_flight for r, _ in req.meta
                if r is not None}

    def leaving(self) -> set[tuple[int, int]]:
        """The attempts whose outcomes are on their way (in the outbox or in flight): the next claim
        may fill their slots."""
        keys = self.in_flight()
        if self.outbox:
            keys.update((r.claimed.job.id, r.claimed.job.runs) for r, _ in self.outbox[1] if r is not None)
        return keys

    @property
    def flying(self) -> bool:
        """Whether a transaction is in flight."""
        return bool(self.pipe and self.pipe.in_flight)

    @property
    def busy(self) -> bool:
        """Whether outcomes or claims are still to be saved or answered (outbox, or in flight)."""
        return self.outbox is not None or self.flying

    # -- outcomes in -------------------------------------------------------------------------------
    def complete(self, finishes: list[FinishParams], meta: Meta | None = None, *, keep_slots: bool = False,
                 hold: bool = False) -> None:
        """Save ``finishes``. With ``hold`` they wait in the outbox for the next claim (or
        :meth:`send`), after any held before; else they are saved now, in a transaction of their own
        (``keep_slots``: their attempts keep their slots until their threads return). A store fault
        keeps them to save again (see :meth:`retry`) and is raised."""
        if hold:
            held = meta if meta is not None else [(None, None)] * len(finishes)  # one entry per outcome
            if self.outbox is not None:  # a store fault before the last claim left some: save all together
                finishes, held = self.outbox[0] + finishes, self.outbox[1] + held
            self.outbox = (finishes, held)
            return
        self._save(finishes, meta, keep_slots)

    def keep(self, finishes: list[FinishParams], meta: Meta | None = None, *, keep_slots: bool = False) -> None:
        """Keep outcomes that a store fault stopped another part from writing (the limiters' gate):
        they still hold their leases and are saved first by the next :meth:`retry`."""
        self.unsaved.append((finishes, meta, keep_slots))

    def give_back(self, finishes: list[FinishParams], meta: Meta | None, applied: list[bool], *,
                  keep_slots: bool = False) -> None:
        """Book attempts given back to a limiter: outcomes that the limiters' report transaction
        wrote under their lease tokens and committed (``applied``: whether each was still current).
        They are accounted for as any saved outcome (slots, counts, log, hooks), exactly once."""
        self._book(finishes, meta, applied, keep_slots)

    def _book(self, finishes: list[FinishParams], meta: Meta | None, applied: list[bool], keep_slots: bool) -> None:
        """Hand committed outcomes to the worker to account for (``applied``: whether each was current)."""
        if meta and not all(applied):
            applied = self._saved_before(finishes, meta, applied)
        self._account(finishes, meta, applied, keep_slots)

    def _saved_before(self, finishes: list[FinishParams], meta: Meta, applied: list[bool]) -> list[bool]:
        """``applied``, where an outcome that was not is nonetheless what the store records for its
        attempt, by this worker: an earlier try saved it, committed, and only its answer was lost (a
        failover, a cut connection), so the store fault kept it and this try found the attempt
        ended. It counts as saved once, not as fenced. A late worker's result, whose attempt the store
        records otherwise (lost, rescued), stays fenced; so does one the store cannot be asked about."""
        out = list(applied)
        for i, (fin, ok) in enumerate(zip(finishes, applied, strict=True)):
            running = meta[i][0]
            if ok or running is None:
                continue
            mine = running.claimed.job
            try:
                job = self.store.job_get(mine.key, full=True)
            except StoreError:
                continue
            out[i] = job is not None and any(a.seq == fin.seq and a.outcome == str(fin.outcome)
                                             and a.worker == mine.worker for a in job.trace)
        return out

    def retry(self) -> None:
        """Save again, oldest first, the outcomes store faults kept (they still hold their leases)."""
        while self.unsaved:
            self._save(*self.unsaved.pop(0))

    def send(self, here: bool = False) -> None:
        """Save the held outcomes that no claim took along: through the pipeline if there is one
        (when it has room; else they wait for the next claim), else (or ``here``) now."""
        if self.outbox is None:
            return
        if self.pipe is not None and not here:
            if self.pipe.room:
                finishes, meta = self.outbox
                self.outbox = None
                self.pipe.submit(Request(finishes, meta, None))
            return
        finishes, meta = self.outbox
        self.outbox = None
        self._save(finishes, meta)

    def claim(self, params: ClaimParams) -> list[Claimed]:
        """Claim jobs, saving the held outcomes in the same transaction. With a pipeline (and not a
        suspect's claim, which goes out with nothing in flight) the transaction goes to a committer
        when there is room, and the claimed jobs come later, from :meth:`collect`: returns []."""
        if self.pipe is not None and not params.suspects:
            if self.pipe.room and (self.outbox or not self.dry):
                finishes, meta = self.outbox or ([], [])
                self.outbox = None
                self.pipe.submit(Request(finishes, meta, params))
            return []
        outbox, self.outbox = self.outbox, None
        if outbox is None:
            claimed: list[Claimed] = self.store.job_claim(params)
            return claimed
        finishes, meta = outbox
        try:
            applied, claimed = transact(self.store, finishes, params)
        except StoreDataError as exc:  # some outcome's data, not the store: saved apart, then the claim
            self._save_apart(finishes, meta, False, exc)
            claimed = self.store.job_claim(params)
            return claimed
        except StoreError:
            self.unsaved.append((finishes, meta, False))
            raise
        self._book(finishes, meta, applied, False)
        return claimed

    # -- the pipeline ------------------------------------------------------------------------------
    def open_pipeline(self, depth: int, wake: Callable[[], None]) -> None:
        """Keep up to ``depth`` transactions in flight from now on (``wake`` is called as each ends)."""
        self.pipe = StorePipeline(self.store, depth, wake)

    def close_pipeline(self) -> None:
        """End the committer threads; from here on the loop saves in transactions of its own."""
        if self.pipe is not None:
            if not self.pipe.close():
                log.error("store transaction(s) still running after the pipeline closed; their leases will "
                          "expire and their jobs be rescued")
            self.pipe = None

    def collect(self, take: Callable[[list[Claimed]], None]) -> None:
        """Take in the pipeline's transactions that ended: book their outcomes, hand the jobs they
        claimed to ``take``. One that failed keeps its outcomes to save again (see :meth:`retry`),
        its claim took nothing, and its error is raised once the others are in; unless the store
        refused some outcome's data (not a fault of the store: :meth:`retry` saves them apart)."""
        if self.pipe is None:
            return
        error: BaseException | None = None
        for req in self.pipe.completed():
            if req.error is not None:
                if req.finishes:
                    self.unsaved.append((req.finishes, req.meta, False))
                if not isinstance(req.error, StoreDataError):
                    error = error or req.error
                continue
            if req.finishes:
                self._book(req.finishes, req.meta, req.applied, False)
            if req.claim is not None and not req.claimed:
                self.dry = True
            take(req.claimed)
        if error is not None:
            raise error

    def settle(self, timeout: float, take: Callable[[list[Claimed]], None]) -> None:
        """Wait up to ``timeout`` seconds for the transactions in flight, and take them in."""
        if self.pipe is not None and self.pipe.in_flight:
            if not self.pipe.wait_settled(timeout):
                log.error("%d store transaction(s) still unanswered after %.0fs; their leases will expire and "
                          "their jobs be rescued", len(self.pipe.in_flight), timeout)
            self.collect(take)

    # -- writing -----------------------------------------------------------------------------------
    def _save(self, finishes: list[FinishParams], meta: Meta | None = None, keep_slots: bool = False) -> None:
        try:
            applied, _ = transact(self.store, finishes, None)
        except StoreDataError as exc:
            self._save_apart(finishes, meta, keep_slots, exc)
            return
        except StoreError:
            self.unsaved.append((finishes, meta, keep_slots))
            raise
        self._book(finishes, meta, applied, keep_slots)

    def _save_apart(self, finishes: list[FinishParams], meta: Meta | None, keep_slots: bool,
                    refused: StoreDataError) -> None:
        """Save outcomes whose batch the store refused for the data of one of them (``refused``), not
        for a fault of its own: the batch in halves, and halves of those, down to the outcome it
        refuses alone, which is saved with its text in plain ASCII or, refused again, as dead with a
        message saying its outcome could not be recorded (see executor.escaped_ascii and
        executor.unstorable). Every other outcome is saved as it was. No data is retried as it was,
        so this ends; a store fault on the way keeps what is left to save again, and raises."""
        log.warning("the store refused the data of an outcome among %d; saving them apart (%s)", len(finishes),
                    refused)
        n = len(finishes)
        finishes = list(finishes)  # a refused outcome is replaced by what is saved in its place
        metas: list[Any] = list(meta) if meta else [None] * n
        applied: dict[int, bool] = {}  # by position: the outcomes saved, and whether each applied
        parts: list[tuple[list[int], StoreDataError | None]] = [(list(range(n)), refused)]
        try:
            while parts:
                part, error = parts.pop()
                if error is None:
                    try:
                        saved, _ = transact(self.store, [finishes[i] for i in part], None)
                        applied.update(zip(part, saved, strict=True))
                        continue
                    except StoreDataError as exc:
                        error = exc
                if len(part) > 1:
                    half = len(part) // 2
                    parts += [(part[half:], None), (part[:half], None)]  # the first half next
                    continue
                [i] = part
                finishes[i], applied[i] = self._save_refused(finishes[i], error)
        except StoreError:
            left = [i for i in range(n) if i not in applied]
            self.unsaved.append(([finishes[i] for i in left], [metas[i] for i in left] if meta else None,
                                 keep_slots))
            raise
        finally:
            done = sorted(applied)
            if done:
                self._book([finishes[i] for i in done], [metas[i] for i in done] if meta else None,
                           [applied[i] for i in done], keep_slots)

    def _save_refused(self, fin: FinishParams, refused: StoreDataError) -> tuple[FinishParams, bool]:
        """Save one outcome the store refused for its data: as plain ASCII, else as unstorable."""
        for attempt in (executor.escaped_ascii(fin), executor.unstorable(fin, refused)):
            try:
                saved, _ = transact(self.store, [attempt], None)
                return attempt, saved[0]
            except StoreDataError as exc:
                log.error("the store refused the outcome of job id %s (%s)", fin.job_id, exc)
                refused = exc
        # Not even firesafe's own ASCII message: a store that refuses that is at fault.
        raise StoreError(f"the store refused even a plain record of job id {fin.job_id}'s outcome: {refused}")
