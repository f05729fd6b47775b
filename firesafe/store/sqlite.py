"""The embedded store: one SQLite file, shared safely by every process on one machine.

WAL journal, ``synchronous=FULL`` (a job whose enqueue returned survives a power cut) and a busy
timeout; every write runs in ``BEGIN IMMEDIATE`` so writers queue instead of failing. A connection
that SQLite opened read-only is reopened for the next write; a store file deleted or replaced while
open is a StoreError at every call, never writes into the unlinked file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from firesafe.clock import Clock, SystemClock
from firesafe.errors import OtherTables, StoreDataError, StoreError
from firesafe.models import Job, attempt_from_row, claim_rank, event_from_row
from firesafe.sanitize import for_store
from firesafe.states import FINISHED, Outcome, State
from firesafe.store import queries
from firesafe.store.base import (
    Claimed,
    ClaimParams,
    DeadFilter,
    DeadPage,
    FinishParams,
    InsertParams,
    JobFilter,
    MovesByQuery,
    Pending,
    RescueParams,
    check_existing,
    check_worker_prefix,
    dead_page,
    dead_params,
    dedupe_batch,
    in_batch_order,
)
from firesafe.store.children import ChildrenCommon
from firesafe.store.common import CoreCommon
from firesafe.store.dashboard_queries import DashboardQueries

Q = queries.load("sqlite")
#: job_claim for jobs never lost (False) and for suspects (True): see the query's comment.
_CLAIM = {suspects: Q["job_claim"].replace("{index}", index).replace("{lost}", lost)
          for suspects, index, lost in ((False, "firesafe_jobs_runnable", "lost = 0"),
                                        (True, "firesafe_jobs_suspects", "lost > 0"))}


def _explain(exc: sqlite3.Error, path: str) -> StoreError:
    if isinstance(exc, sqlite3.DataError):  # a value SQLite cannot take (too big): the data's fault
        return _refused(exc, path)
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        msg = f"{path} is not a usable firesafe SQLite store ({text}); is it corrupt or another kind of file?"
    elif "readonly" in text or "read-only" in text:
        refusing = _refusing_writes(path)
        if refusing:
            msg = (f"{path} is read-only ({text}); refusing writes now: {', '.join(refusing)}; firesafe needs to "
                   "write to the file, its -wal and -shm files and its folder")
        else:  # SQLite opened the connection read-only while the file refused writes: it is reopened
            msg = (f"{path} is read-only ({text}): it refused writes when this connection was opened; "
                   "the next try reopens it")
    elif "disk is full" in text or "database or disk is full" in text:
        msg = f"the disk holding {path} is full ({text}); nothing was written"
    elif "disk I/O error" in text:  # an open file that stopped taking writes: made immutable, fs remounted ro
        code = getattr(exc, "sqlite_errorname", "") or "SQLITE_IOERR"
        msg = (f"cannot write to {path} ({text}, {code}): was the file or its filesystem made read-only, "
               "or is the disk failing?")
    elif "unable to open" in text:
        msg = f"cannot open {path} ({text}); does its folder exist and is it writable?"
    elif "locked" in text or "busy" in text:
        msg = f"{path} stayed locked by another process ({text})"
    else:
        msg = f"SQLite store {path}: {text}"
    err = StoreError(msg)
    err.__cause__ = exc
    return err


def _refused(exc: Exception, path: str) -> StoreDataError:
    """The error for data SQLite refused (text that is not UTF-8, a value too big): not a fault of
    the store, so a retry of the same write would be refused again."""
    err = StoreDataError(f"SQLite store {path} refused the data it was given ({type(exc).__name__}: "
                         f"{for_store(str(exc))[:300]})")
    err.__cause__ = exc
    return err


class SQLiteCore(CoreCommon, ChildrenCommon, DashboardQueries, MovesByQuery):
    """The core of the :class:`~firesafe.store.contract.Store` in one SQLite file: jobs, attempts, events,
    leases and the dashboard's reads. :class:`firesafe.stores.SQLiteStore` adds each part's storage."""

    dialect = "sqlite"
    concurrent_writers = False  # one writer at a time
    supports_listen = False
    schema: str | None = None  # SQLite has no schemas: firesafe's tables are the file's firesafe_* tables
    q: Mapping[str, str] = Q

    if TYPE_CHECKING:  # provided by the alerts part's storage (firesafe/alerts/store_sqlite.py), mixed in above
        def _outbox_dead(self, conn: sqlite3.Connection, job_ids: Sequence[int], now: float | None) -> None: ...

    def __init__(self, path: str, clock: Clock | None = None, *, busy_timeout: float = 30.0,
                 synchronous: str = "FULL") -> None:
        if path in ("", ":memory:"):
            raise StoreError("an in-memory SQLite store cannot be shared by workers; give a file path")
        self.path = os.path.abspath(path)
        self.url = f"sqlite:///{path}"
        self.where = self.url  # for messages: a SQLite URL holds no password
        self.clock = clock or SystemClock()
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._batch: _Batch | None = None
        self._pid = os.getpid()
        #: (device, inode) of the file the first connection opened: see _check_file.
        self._file: tuple[int, int] | None = None
        self._checked_at = 0.0  # time.monotonic() of the last check that passed

    # -- connections -------------------------------------------------------------------------
    def _conn(self, write: bool = False) -> sqlite3.Connection:
        if self._pid != os.getpid():  # forked: never reuse the parent's connections
            self._local = threading.local()
            self._all = []
            self._write_lock = threading.Lock()
            self._pid = os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is not None and write and self._local.read_only:
            self._drop(conn)  # opened while the store refused writes: see _fault
            conn = None
        if conn is None:
            read_only = bool(_refusing_writes(self.path, folder=False))
            conn = self._open()
            self._local.conn = conn
            self._local.read_only = read_only
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self, conn: sqlite3.Connection) -> None:
        """Close ``conn`` (not in a transaction) so that this thread's next call opens a new one."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        try:
            conn.close()
        except sqlite3.Error:
            pass

    def _open(self) -> sqlite3.Connection:
        self._check_file()  # never open (and so create again) a store file that was deleted or replaced
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row  # connect(timeout=) is SQLite's busy timeout
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch the journal to WAL (got {mode})")
            pragma = _SYNCHRONOUS.get(self.synchronous.upper())
            if pragma is None:
                raise StoreError(f"unknown synchronous mode {self.synchronous!r}")
            conn.execute(pragma)
            conn.execute("PRAGMA foreign_keys = ON")
            conn.create_function("firesafe_sha256", 1, _sha256, deterministic=True)  # job_reserve_finished
            opened = _identity(self.path)
            with self._lock:
                if self._file is None and opened is not None:
                    self._file = opened
            if opened is None or opened != self._file:  # deleted or replaced since the check above
                raise self._moved(opened)
            self._checked_at = time.monotonic()
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _explain(exc, self.path) from exc
            raise
        return conn

    def _check_file(self) -> None:
        """Raise StoreError unless the path still names the file this store opened.

        Deleting or replacing the file under running processes splits the store in two: they would go
        on writing, without an error, into the unlinked file that nothing else reads any more, while
        new processes use the new one. Checked on opening a connection, then by reads and writes at
        most every CHECK_EVERY seconds while the check passes, and at every call once it failed: the
        error repeats, and no retry reopens the store on the new file.
        """
        if self._file is None:  # closed meanwhile: the next connection records the file anew
            return
        now = _identity(self.path)
        if now != self._file:
            raise self._moved(now)
        self._checked_at = time.monotonic()

    def _check_file_due(self) -> None:
        if time.monotonic() - self._checked_at >= CHECK_EVERY:
            self._check_file()

    def _moved(self, now: tuple[int, int] | None) -> StoreError:
        what = "no file has that path now" if now is None else "the path names another file now"
        return StoreError(f"the store file {self.path} was deleted or replaced while open ({what}); nothing was "
                          "written: restart the worker and every other process using the store")

    def _fault(self, exc: sqlite3.Error, conn: sqlite3.Connection) -> StoreError:
        """The StoreError for ``exc``. A connection refused as read-only is dropped: SQLite opens one
        read-only, for good, when the file refuses writes at that moment, so only a new one can write
        once the file takes writes again (its transaction is rolled back before this is called). For
        the same reason a write never uses a connection that was opened while the files refused writes
        (by a read, say): it opens a new one."""
        if _read_only(exc):
            self._drop(conn)
        return _explain(exc, self.path)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn(write=True)
        # Threads of one process queue on a lock rather than on SQLite's busy handler, which sleeps
        # in steps of milliseconds; other processes still wait through busy_timeout.
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._fault(exc, conn) from exc
            try:
                yield conn
                # Last thing before the commit: a file found deleted or replaced gets a rollback, and the
                # caller an error instead of the result.
                self._check_file_due()
                conn.execute("COMMIT")
            except BaseException as exc:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(exc, sqlite3.Error):
                    raise self._fault(exc, conn) from exc
                if isinstance(exc, UnicodeError):  # text that has no UTF-8 (a lone surrogate)
                    raise _refused(exc, self.path) from exc
                raise

    def _group_write(self, name: str, params: dict[str, Any]) -> int:
        """Run one write statement, committed together with those other threads issue meanwhile.

        Group commit: the first thread of a batch waits for the write lock while others join its
        batch, then runs them all in one transaction (one fsync) and hands each its row count.
        Every caller returns only after its row is durably committed.
        """
        with self._lock:
            batch = self._batch
            leader = batch is None
            if batch is None:
                batch = self._batch = _Batch()
            index = len(batch.items)
            batch.items.append((name, params))
        if not leader:
            batch.done.wait()
        else:
            try:
                with self._tx() as c:
                    with self._lock:
                        self._batch = None  # later callers start the next batch
                    batch.rowcounts = [c.execute(Q[n], p).rowcount for n, p in batch.items]
            except BaseException as exc:
                batch.error = exc
                raise
            finally:
                batch.done.set()
        if batch.error is not None:
            raise batch.error
        return batch.rowcounts[index]

    def _read(self, name: str, params: dict[str, Any] | None = None) -> list[sqlite3.Row]:
        conn = self._read_conn()
        try:
            return conn.execute(Q[name], params or {}).fetchall()
        except sqlite3.Error as exc:
            raise self._fault(exc, conn) from exc
        except UnicodeError as exc:
            raise _refused(exc, self.path) from exc

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        with self._tx() as c:
            return c.execute(Q[name], params).rowcount

    def _exec_many(self, c: sqlite3.Connection, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        c.executemany(Q[name], [dict(r) for r in rows])

    def _list(self, values: Iterable[Any]) -> str:
        return json.dumps(list(values))

    def _read_conn(self) -> sqlite3.Connection:
        conn = self._conn()
        self._check_file_due()
        return conn

    def now(self) -> float:
        return self.clock.now()

    def _now(self) -> float:
        """The ``now`` parameter of a query: SQLite has no clock of its own to read, so always ours."""
        return self.clock.now()

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
            self._file = None  # nothing is open now: the next connection adopts whatever file the path names
        self._local = threading.local()

    # -- schema ------------------------------------------------------------------------------
    def migrate(self, *, allow_other_tables: bool = False) -> list[int]:
        applied_now: list[int] = []
        with self._tx() as conn:
            tables = [r[0] for r in conn.execute(_TABLES)]
            if "firesafe_migrations" not in tables and not allow_other_tables:
                others = [t for t in tables if not t.lower().startswith("firesafe_")]
                if others:
                    raise OtherTables(self.path, others)
            conn.execute(Q["migrations_create"])
            done = {r[0] for r in conn.execute(Q["migrations_applied"])}
            queries.check_version(self.url, self.dialect, max(done, default=0))
            for version, sql in queries.migrations("sqlite"):
                if version in done:
                    continue
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute(Q["migration_record"], {"version": version, "now": self.now()})
                applied_now.append(version)
        return applied_now

    def schema_version(self) -> int:
        conn = self._read_conn()
        try:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'firesafe_migrations'"
            ).fetchone()
            if not exists:
                return 0
            rows = conn.execute(Q["migrations_applied"]).fetchall()
        except sqlite3.Error as exc:
            raise self._fault(exc, conn) from exc
        return max((r[0] for r in rows), default=0)

    # -- jobs --------------------------------------------------------------------------------
    async def job_insert_many_async(self, items: Sequence[InsertParams], conn: Any) -> list[Job]:
        raise StoreError("enqueue_async(conn=...) joins a PostgreSQL transaction; the SQLite store has none to join")

    def job_insert_many(self, items: Sequence[InsertParams], conn: Any = None) -> list[Job]:
        if conn is not None:
            raise StoreError("enqueue(conn=...) joins a PostgreSQL transaction; the SQLite store has none to join")
        unique = dedupe_batch(items)
        with self._tx() as c:
            stored = self._insert_in(c, unique)
        return in_batch_order(items, stored)

    def _insert_in(self, c: sqlite3.Connection, unique: list[InsertParams],
                   parent_id: int | None = None) -> dict[str, Job]:
        now = self.now()
        keys = json.dumps([i.key for i in unique])
        # Keys whose job's history was pruned stay reserved by their records: not inserted (see
        # job_insert; this write transaction keeps every other writer out until it ends).
        reserved = {row["key"]: row for row in _dicts(c, Q["reserved_by_keys"], {"keys": keys})}
        before = c.execute(Q["job_max_id"]).fetchone()[0]
        c.executemany(Q["job_insert"], [
            {"key": i.key, "name": i.name, "queue": i.queue, "fingerprint": i.fingerprint,
             "payload": i.payload, "arg_names": i.arg_names, "max_attempts": i.max_attempts,
             "run_at": i.run_at, "delay": i.delay, "now": now, "trace_context": i.trace_context,
             "priority": i.priority, "parent_id": parent_id}
            for i in unique if i.key not in reserved
        ])
        stored: dict[str, Job] = {}
        for row in _dicts(c, Q["job_by_keys"], {"keys": keys}):
            job = Job.from_row(row)
            job.created = row["id"] > before
            stored[job.key] = job
        for key, row in reserved.items():  # a job's row still stored (not yet deleted) comes first
            stored.setdefault(key, Job.from_reserved_row(row))
        check_existing(unique, stored)  # raises: the rollback drops this batch's rows
        return stored

    def _note_woken(self, c: sqlite3.Connection, ids: Sequence[int], now: float | None) -> None:
        for job_id in ids:
            c.execute(Q["event_insert"], {"job_id": job_id, "now": now, "kind": "woken", "actor": "children",
                                          "detail": None})

    def _note_spawned(self, c: sqlite3.Connection, parent_id: int, detail: str, now: float | None) -> None:
        c.execute(Q["event_insert"], {"job_id": parent_id, "now": now, "kind": "spawned", "actor": "job",
                                      "detail": detail})

    def job_get(self, key: str, *, full: bool = False) -> Job | None:
        rows = self._read("job_by_key", {"key": key})
        if not rows:
            return None
        job = Job.from_row(rows[0])
        if full:
            job.trace = [attempt_from_row(r) for r in self._read("attempts_of_job", {"job_id": job.id})]
            job.events = [event_from_row(r) for r in self._read("events_of_job", {"job_id": job.id})]
        return job

    def job_claim(self, params: ClaimParams) -> list[Claimed]:
        now = self.now()
        with self._tx() as c:
            return self._claim(c, params, now)

    def job_finish_many(self, items: Sequence[FinishParams]) -> list[bool]:
        now = self.now()
        with self._tx() as c:
            return self._finish(c, items, now)

    def job_finish_and_claim(self, finishes: Sequence[FinishParams],
                             claim: ClaimParams) -> tuple[list[bool], list[Claimed]]:
        now = self.now()
        with self._tx() as c:
            return self._finish(c, finishes, now), self._claim(c, claim, now)

    def _claim(self, c: sqlite3.Connection, params: ClaimParams, now: float) -> list[Claimed]:
        token = uuid.uuid4().hex
        rows = _dicts(c, _CLAIM[bool(params.suspects)], {
            "token": token, "now": now, "lease": params.lease, "worker": params.worker,
            "queues": json.dumps(list(params.queues)), "limit": params.limit,
        })
        if len(rows) > 1:  # RETURNING promises no order: the claim's own (see job_claim)
            rows.sort(key=lambda r: (claim_rank(r["run_at"], r["priority"]), r["run_at"], r["id"]))
        return [Claimed(Job.from_claim_row(r, params.worker), token) for r in rows]

    def _finish(self, c: sqlite3.Connection, items: Sequence[FinishParams], now: float) -> list[bool]:
        applied: list[bool] = []
        if items:
            for it in items:
                p = {"job_id": it.job_id, "token": it.token, "state": str(it.state), "delay": it.delay,
                     "given_back": it.given_back, "result": it.result, "error_type": it.error_type,
                     "message": it.message, "reason": it.reason, "now": now}
                ok = c.execute(Q["job_finish"], p).rowcount == 1
                if ok:
                    c.execute(Q["attempt_close"], {
                        "job_id": it.job_id, "seq": it.seq, "given_back": it.given_back, "outcome": str(it.outcome),
                        "error_type": it.error_type, "message": it.message, "traceback": it.traceback,
                        "detail": it.detail, "now": now})
                applied.append(ok)
            # Alerts of jobs that went dead, in this same transaction (invariant 4: an outbox).
            self._outbox_dead(c, [it.job_id for it, ok in zip(items, applied, strict=True)
                                  if ok and it.state == State.DEAD], now)
            # Children that ended are counted off their parents here too (nothing to do without one).
            self._settle(c, [it.job_id for it, ok in zip(items, applied, strict=True)
                             if ok and it.parent_id is not None], now)
        return applied

    def job_heartbeat_many(self, items: Sequence[tuple[int, str]], lease: float) -> dict[int, bool]:
        now = self.now()
        held: dict[int, bool] = {}
        with self._tx() as c:
            for job_id, token in items:
                row = c.execute(Q["job_heartbeat"], {"job_id": job_id, "token": token, "lease": lease,
                                                     "now": now}).fetchone()
                if row is not None:
                    held[job_id] = bool(row[0])
        return held

    def worker_process_gone(self, prefix: str, detail: dict[str, Any] | None = None) -> int:
        check_worker_prefix(prefix)
        now, why = self.now(), json.dumps(detail or {})
        with self._tx() as c:
            ended = [r[0] for r in c.execute(Q["job_expire_process"], {"prefix": prefix, "now": now}).fetchall()]
            for job_id in ended:
                c.execute(Q["event_insert"], {"job_id": job_id, "now": now, "kind": "lease_ended",
                                              "actor": "supervisor", "detail": why})
            c.execute(Q["worker_remove_process"], {"prefix": prefix})
            c.execute(Q["leader_release_process"], {"prefix": prefix})
        return len(ended)

    def job_rescue_many(self, items: Sequence[RescueParams]) -> list[bool]:
        now = self.now()
        applied: list[bool] = []
        with self._tx() as c:
            for it in items:
                ok = c.execute(Q["job_rescue"], {
                    "job_id": it.job_id, "token": it.token, "state": str(it.state), "delay": it.delay,
                    "reason": it.reason, "message": it.message, "now": now}).rowcount == 1
                if ok:
                    c.execute(Q["attempt_close"], {
                        "job_id": it.job_id, "seq": it.seq, "given_back": 0, "outcome": str(Outcome.LOST),
                        "error_type": "WorkerLost", "message": it.message, "traceback": None,
                        "detail": None, "now": now})
                applied.append(ok)
            self._outbox_dead(c, [it.job_id for it, ok in zip(items, applied, strict=True)
                                  if ok and it.state == State.DEAD], now)  # alerts: see job_finish_many
            self._settle(c, [it.job_id for it, ok in zip(items, applied, strict=True)
                             if ok and it.state in FINISHED], now)  # a child that ended: see _finish
        return applied

    @staticmethod
    def _filter_params(f: JobFilter) -> dict[str, Any]:
        return {"state": f.state, "name": f.name, "queue": f.queue, "error_type": f.error_type,
                "since": f.since, "until": f.until,
                "keys": json.dumps(list(f.keys)) if f.keys is not None else None,
                "limit": f.limit, "offset": f.offset}

    def job_list(self, filt: JobFilter) -> list[Job]:
        return [Job.from_row(r) for r in self._read("job_list", self._filter_params(filt))]

    def dead_list(self, filt: DeadFilter) -> DeadPage:
        return dead_page(self._read("dead_list", dead_params(filt)), filt.limit, Job.from_row)

    def _move_many(self, query: str, kind: str, ids: Sequence[int], actor: str, detail: str | None) -> list[int]:
        now = self.now()
        moved: list[int] = []
        with self._tx() as c:
            for job_id in ids:
                if c.execute(Q[query], {"job_id": job_id, "now": now}).rowcount == 1:
                    c.execute(Q["event_insert"], {"job_id": job_id, "now": now, "kind": kind, "actor": actor,
                                                  "detail": detail})
                    moved.append(job_id)
            self._recount(c, query, moved, now)
        return moved

    def job_delete_finished(self, state: State, older_than: float, limit: int = 1000) -> int:
        with self._tx() as c:
            return c.execute(Q["job_delete_finished"], {
                "state": str(state), "before": self.now() - older_than, "limit": limit}).rowcount

    def job_pending(self, queues: Sequence[str]) -> Pending:
        r = self._read("job_pending", {"now": self.now(), "queues": json.dumps(list(queues))})[0]
        return Pending(r["runnable"], r["running"], r["next_at"], r["suspects"])

    # -- workers and leaders -----------------------------------------------------------------
    def leader_acquire(self, name: str, holder: str, ttl: float) -> bool:
        with self._tx() as c:
            row = c.execute(Q["leader_acquire"], {"name": name, "holder": holder, "ttl": ttl,
                                                  "now": self.now()}).fetchone()
        return row is not None


def _dicts(conn: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows as plain dicts: Job.from_row reads some 25 columns by name, which a dict answers faster
    than sqlite3.Row (this is on the enqueue and claim paths, once per job)."""
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql, params).fetchall()
    if not rows:
        return []
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in rows]


#: How often (seconds, at most) reads and writes check that the path still names the store's file. A
#: check in every write transaction (a stat(), and what it costs the SQLite work after it) is a visible
#: share of a small commit, the more so the less durable the commit. Once a second costs nothing
#: measurable and leaves at most a second of writes going where the deleted file's data went.
CHECK_EVERY = 1.0

#: SQLite's primary result code for "attempt to write a readonly database" (the low byte of every
#: SQLITE_READONLY_* extended code).
_SQLITE_READONLY = 8


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file ``path`` names, or None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot check the store file {path} ({exc})") from exc
    return st.st_dev, st.st_ino


def _read_only(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == _SQLITE_READONLY
    return "readonly" in str(exc)


def _refusing_writes(path: str, folder: bool = True) -> list[str]:
    """Which of the store's files (those that exist) and, with ``folder``, its folder refuse writes
    now (as root too: access() honours the immutable flag and a read-only mount)."""
    name = os.path.basename(path)
    candidates = [(os.path.dirname(path), "its folder")] if folder else []
    candidates += [(path + s, name + s) for s in ("", "-wal", "-shm")]
    return [what for f, what in candidates if os.path.exists(f) and not os.access(f, os.W_OK)]


#: PRAGMA takes no bound parameters: each allowed mode is a fixed statement.
_SYNCHRONOUS = {mode: f"PRAGMA synchronous = {mode}" for mode in ("EXTRA", "FULL", "NORMAL", "OFF")}


class _Batch:
    __slots__ = ("done", "error", "items", "rowcounts")

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.done = threading.Event()
        self.rowcounts: list[int] = []
        self.error: BaseException | None = None


#: The file's tables and views but SQLite's own: before creating firesafe's tables, migrate looks for
#: another application's. Not a named query: it has no PostgreSQL counterpart (a PostgreSQL store
#: keeps its tables in a schema of their own), as schema_version's look at sqlite_master has none.
_TABLES = (r"SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\_%' ESCAPE '\'"
           " ORDER BY name")


def _statements(sql: str) -> list[str]:
    """Split a migration file into statements (none of ours contains a ';' inside a literal)."""
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def _sha256(text: str | None) -> str | None:
    """SQL's firesafe_sha256(text): the SHA-256 (hex) of its UTF-8, as PostgreSQL's
    encode(sha256(convert_to(text, 'UTF8')), 'hex')."""
    return None if text is None else hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
