"""The server store: PostgreSQL, shared by any number of worker processes and machines.

Tables live in their own schema (``?schema=NAME`` in the URL, default ``firesafe``). Claims use
``FOR UPDATE SKIP LOCKED``; each batch (claim, finishes, heartbeats, rescues) is one statement, so it
is atomic and costs one round trip. Times come from the database's clock unless a clock is injected
(tests), so workers whose clocks disagree never steal a live lease. Enqueues ``NOTIFY`` the schema's
channel when they commit; :meth:`PostgresCore.listen` lets an idle worker wake at once.
Commits are synchronous (the server's default): a job whose enqueue returned survives a crash.
Behind a transaction-mode pooler (PgBouncer), ``?pooler=transaction`` keeps every connection free of
session state, and ``?direct=`` names the server itself for LISTEN and migrations (see :func:`split_url`).

Enqueue in your own transaction (the transactional outbox): the job exists if and only if your
transaction commits, and a rolled-back enqueue leaves no job and no reserved key::

    app = App("postgresql://app@db/shop")                  # firesafe's tables: schema "firesafe"
    with psycopg.connect("postgresql://app@db/shop") as conn:  # autocommit off: one transaction
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", ("o-1", 100))
        ship.enqueue("o-1", key="ship:o-1", conn=conn)      # written in conn's transaction
        conn.commit()                                        # the order and its job, or neither

An idempotency conflict raised there undoes only the enqueue (a savepoint); your transaction goes on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from firesafe.clock import Clock
from firesafe.errors import ConfigError, InvalidInput, StoreDataError, StoreError
from firesafe.models import Job, attempt_from_row, event_from_row
from firesafe.sanitize import for_store
from firesafe.states import FINISHED, State
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

log = logging.getLogger("firesafe.store")


class _QuietPoolRetries(logging.Filter):
    """Drops psycopg's and psycopg_pool's warnings about firesafe's own connections: one for each
    failed connection attempt of its pools (one per retry, many during an outage), and those about a
    connection that broke under it ("discarding closed connection", "error ignored in rollback",
    several for each connection a failover cuts). Firesafe says once what is wrong, as a StoreError
    or a worker's "store fault" line. Other pools' and connections' records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        # "error connecting in 'firesafe-...'", "reconnection attempt in pool 'firesafe-...' failed"
        if "'firesafe-" in record.getMessage():
            return False
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:  # a connection, or the pipeline or transaction of one
            conn = getattr(arg, "_conn", arg)
            if isinstance(conn, psycopg.Connection) and any(conn in store._conns for store in list(_STORES)):
                return False
        return True


for _name in ("psycopg.pool", "psycopg", "psycopg.transaction"):
    logging.getLogger(_name).addFilter(_QuietPoolRetries())

DEFAULT_SCHEMA = "firesafe"
#: Lower-case identifiers only, short enough that ``<schema>_jobs`` fits PostgreSQL's 63-byte names.
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")


def parse_url(url: str) -> tuple[str, str]:
    """Split a store URL into the libpq URL to connect with and firesafe's schema.

    >>> parse_url("postgresql://postgres@127.0.0.1:5432/test?schema=jobs&sslmode=disable")
    ('postgresql://postgres@127.0.0.1:5432/test?sslmode=disable', 'jobs')
    >>> parse_url("postgres://db/app")
    ('postgres://db/app', 'firesafe')
    >>> parse_url("postgresql://db/app?options=-c%20work_mem%3D8MB&schema=a_b&application_name=x+y")
    ('postgresql://db/app?options=-c%20work_mem%3D8MB&application_name=x+y', 'a_b')
    >>> parse_url("postgresql://db/app?schema=Robert';DROP")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: invalid schema ...
    >>> parse_url("postgresql://db/app?sslmod=disable")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: the store URL is not a valid PostgreSQL URL: invalid URI query parameter: "sslmod"
    >>> parse_url("postgresql://%a0@db/app")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: the store URL has a %XX escape that does not decode to UTF-8 text ...
    """
    libpq, schema, _, _ = split_url(url)
    return libpq, schema


#: The values of ``?pooler=``: what sits between the store's connections and the server.
POOLERS = ("transaction",)


def split_url(url: str) -> tuple[str, str, str | None, str | None]:
    """A store URL's libpq URL, schema, pooler (``?pooler=transaction`` or None) and direct libpq URL
    (``?direct=``, %-escaped: the server itself, for LISTEN and migrations; None if not given).

    >>> split_url("postgresql://app@bouncer:6432/shop?pooler=transaction&schema=jobs"
    ...           "&direct=postgresql%3A%2F%2Fapp%40db%3A5432%2Fshop%3Fsslmode%3Ddisable")
    ('postgresql://app@bouncer:6432/shop', 'jobs', 'transaction', 'postgresql://app@db:5432/shop?sslmode=disable')
    >>> split_url("postgresql://app@db/shop?pooler=session")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: invalid ?pooler= 'session' in the store URL: ...
    >>> split_url("postgresql://app@db/shop?direct=postgresql%3A%2F%2Fdb%2Fshop")
    Traceback (most recent call last):
    ...
    firesafe.errors.ConfigError: ?direct= in the store URL is for ?pooler=transaction ...
    """
    parts = urlsplit(url)
    # Split the query by hand: libpq decodes %XX but not '+', so the other parameters pass verbatim.
    pairs = [p for p in parts.query.split("&") if p]
    schema = _one(pairs, "schema") or DEFAULT_SCHEMA
    if not _SCHEMA.match(schema) or schema.startswith("pg_") or schema == "information_schema":
        raise ConfigError(
            f"invalid schema {schema!r} in the store URL: use 1 to 48 lower-case letters, digits or '_', "
            "starting with a letter or '_' (and not pg_*)")
    pooler, direct = _one(pairs, "pooler"), _one(pairs, "direct")
    if pooler is not None and pooler not in POOLERS:
        raise ConfigError(f"invalid ?pooler= {for_store(pooler)[:40]!r} in the store URL: use ?pooler=transaction "
                          "behind a transaction-mode pooler (PgBouncer), or leave it out")
    if direct is not None and pooler is None:
        raise ConfigError("?direct= in the store URL is for ?pooler=transaction (the server itself, for LISTEN "
                          "and migrations); without a pooler, the URL already is direct")
    rest = "&".join(p for p in pairs if p.partition("=")[0] not in ("schema", "pooler", "direct"))
    libpq = _checked(urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), "the store URL")
    if direct is not None:
        if urlsplit(direct).scheme not in ("postgresql", "postgres"):
            raise ConfigError("?direct= in the store URL must be a %-escaped postgresql:// URL of the server")
        if any(p.partition("=")[0] in ("schema", "pooler", "direct") for p in urlsplit(direct).query.split("&")):
            raise ConfigError("?direct= in the store URL takes no schema, pooler or direct of its own: "
                              "the store URL's apply")
        direct = _checked(direct, "the ?direct= URL")
        if conninfo_to_dict(direct).get("password"):  # printed URLs mask the store URL's password, not this
            raise ConfigError("?direct= in the store URL must name no password: the store URL's is used "
                              "(or PGPASSWORD, ~/.pgpass)")
    return libpq, schema, pooler, direct


def _one(pairs: list[str], name: str) -> str | None:
    """The value of query parameter ``name`` (%XX decoded), given at most once."""
    values = [unquote(p.partition("=")[2]) for p in pairs if p.partition("=")[0] == name]
    if len(values) > 1:
        raise ConfigError(f"the store URL gives ?{name}= {len(values)} times; give it once")
    return values[0] if values else None


def _checked(libpq: str, what: str) -> str:
    """``libpq`` once libpq can read it; ``what`` names it in the error."""
    try:  # libpq decodes %XX escapes into bytes, which psycopg then reads as UTF-8
        conninfo_to_dict(libpq)
    except UnicodeDecodeError:
        raise ConfigError(f"{what} has a %XX escape that does not decode to UTF-8 text (in the user, "
                          "password, database or a parameter); escape each byte of the UTF-8 text") from None
    except psycopg.Error as exc:  # a parameter libpq does not know, a malformed URL: no use connecting
        raise ConfigError(f"{what} is not a valid PostgreSQL URL: {_first_line(exc)}") from None
    return libpq


def _claim_limit(limit: int) -> int:
    """The row limit written into a claim's text: from 32 up, a multiple of 16 (a claim takes up to
    its limit, so fewer is allowed). Each limit is a prepared statement of its own, and a connection
    keeps only so many (psycopg: 100); a worker's claims range over 1 to 128 and more, this keeps
    them to 38 texts up to 128.

    >>> [_claim_limit(n) for n in (1, 6, 31, 32, 47, 48, 127, 128)]
    [1, 6, 31, 32, 32, 48, 112, 128]
    """
    return limit - limit % 16 if limit >= 32 else limit


def _where(url: str) -> str:
    """Where a URL points, without its password: every host of a multi-host URL (libpq tries them in
    turn; with ``target_session_attrs=read-write`` it keeps the one that takes writes).

    >>> _where("postgresql://app:pw@DB:5432/jobs?schema=q")
    'postgresql://app@db:5432/jobs'
    >>> _where("postgresql://app:pw@db1:5432,db2:5433,db3/jobs?target_session_attrs=read-write")
    'postgresql://app@db1:5432,db2:5433,db3/jobs'
    """
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    hosts = []
    for netloc in parts.netloc.rpartition("@")[2].split(","):
        one = urlsplit(f"//{netloc}")  # a port that is no number raises ValueError, as for one host
        hosts.append(f"{one.hostname or 'localhost'}{f':{one.port}' if one.port else ''}")
    return f"postgresql://{user}{','.join(hosts)}{parts.path}"


def _read_only(exc: BaseException) -> bool:
    """The server refused a write as read-only: a standby (not yet promoted, or a demoted primary)
    that the connection reached. Transient for a failover: new connections find the primary."""
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction)


def _plan_changed(exc: BaseException) -> bool:
    """A statement this connection prepared no longer fits its tables (SQLSTATE 0A000 is broader)."""
    return isinstance(exc, psycopg.errors.FeatureNotSupported) and "cached plan must not change" in str(exc)


_Item = TypeVar("_Item", FinishParams, RescueParams)


def _once_each(items: Sequence[_Item]) -> tuple[Sequence[_Item], list[bool]]:
    """The items of a batch without those naming a job an earlier item names, and per item whether
    it is its job's first. One statement cannot write one attempt's trace entry twice; as on SQLite,
    the first item applies and the rest are fenced (see :func:`_applied_per_item`)."""
    seen: set[int] = set()
    firsts = []
    for i in items:
        firsts.append(i.job_id not in seen)
        seen.add(i.job_id)
    if all(firsts):
        return items, firsts
    return [i for i, first in zip(items, firsts, strict=True) if first], firsts


def _generations(items: Sequence[FinishParams]) -> list[Sequence[FinishParams]]:
    """A batch of finishes as parts of which none holds a job and one of its children, children's
    parts first: job_finish counts a child off its parent in the statement that ends the child, and
    one statement cannot write a row twice. Almost every batch is one part."""
    ids = {i.job_id for i in items}
    parents = {i.parent_id for i in items if i.parent_id in ids}
    if not parents:
        return [items]
    return [[i for i in items if i.job_id not in parents],
            *_generations([i for i in items if i.job_id in parents])]


def _applied_per_item(items: Sequence[_Item], firsts: list[bool], applied: set[int]) -> list[bool]:
    """Per item of a batch, whether it applied: it is its job's first item, and the job's statement did."""
    return [first and i.job_id in applied for i, first in zip(items, firsts, strict=True)]


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (libpq's run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _render(schema: str, channel: str) -> dict[str, str]:
    """The dialect's named queries with the schema and channel substituted as quoted identifiers."""
    ident = sql.Identifier(schema).as_string(None)
    chan = sql.Identifier(channel).as_string(None)
    q = {name: text.replace("{schema}", ident).replace("{channel}", chan)
         for name, text in queries.load("postgres").items()}
    # job_insert without its ON CONFLICT clause: for batches of new keys (see job_insert's comment).
    on_conflict = "\n    ON CONFLICT (key) DO NOTHING\n"
    assert q["job_insert"].count(on_conflict) == 1, "job_insert must keep its one ON CONFLICT line"
    q["job_insert_new"] = q["job_insert"].replace(on_conflict, "\n")
    # job_finish without its count-down of children: for batches without children (most), which
    # would otherwise pay for its empty steps at every finish (see job_finish's comment).
    done, count_down, _ = q["job_finish"].partition(_COUNT_DOWN)
    assert count_down, "job_finish must keep its count-down of children after its trace entries"
    q["job_finish_plain"] = done + "\nSELECT id FROM done;\n"
    return q


#: Where job_finish's count-down of children begins: its first step (see _render).
_COUNT_DOWN = ",\nended AS ("



def _text_array(values: Sequence[str | None]) -> str:
    r"""A PostgreSQL array literal of text values, to send as one parameter and cast to ``text[]``.

    Written by hand because it is on the bulk-enqueue path: psycopg's generic list adapters cost
    several microseconds per element, this costs a fraction of one.

    >>> print(_text_array(['a', 'say "hi"', None, 'back\\slash', '{x, y}']))
    {"a","say \"hi\"",NULL,"back\\slash","{x, y}"}
    >>> print(_text_array(['say "hi"', 'back\\slash']))
    {"say \"hi\"","back\\slash"}
    >>> print(_text_array(['plain', 'words']), _text_array([]), _text_array([None, None]))
    {"plain","words"} {} {NULL,NULL}
    """
    if not values:
        return "{}"
    nulls = values.count(None)
    if nulls == len(values):  # a column no item of the batch fills (a batch of successes has several)
        return "{" + ",".join(["NULL"] * nulls) + "}"
    if nulls:
        return "{" + ",".join("NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
                              for v in values) + "}"
    strings = cast("Sequence[str]", values)  # no None among them: counted above
    joined = '","'.join(strings)
    if "\\" not in joined and joined.count('"') == 2 * (len(values) - 1):  # nothing to escape
        return '{"' + joined + '"}'
    escaped = [v.replace("\\", "\\\\").replace('"', '\\"') for v in strings]
    return '{"' + '","'.join(escaped) + '"}'


def _number_array(values: Sequence[float | int | None]) -> str:
    """A PostgreSQL array literal of numbers (finite), to cast to ``int[]``, ``bigint[]`` or ``float8[]``.

    >>> _number_array([1, 2.5, None]), _number_array([3, 4]), _number_array([None])
    ('{1,2.5,NULL}', '{3,4}', '{NULL}')
    """
    nulls = values.count(None)
    if nulls == len(values):
        return "{" + ",".join(["NULL"] * nulls) + "}"
    text = ",".join(["NULL" if v is None else repr(v) for v in values])
    if "n" in text.replace("NULL", ""):  # repr gives 'inf' and 'nan' for the numbers PostgreSQL must not get
        raise InvalidInput("times and delays must be finite numbers")
    return "{" + text + "}"


@dataclass(frozen=True, slots=True)
class _Statement:
    """One statement of an insert plan (see ``PostgresCore._insert_plan``): a named query and its
    parameters; its rows go back as tuples (``tuples``) or as dicts."""

    query: str
    params: dict[str, Any]
    tuples: bool = False


@dataclass(frozen=True, slots=True)
class _Pipelined:
    """The chunks of a large insert of the store's own, for the sync driver to send in one pipeline
    (see ``PostgresCore._insert_all_pipelined``); ``chunks()`` makes them afresh for a second try."""

    chunks: Callable[[], Iterator[dict[str, Any]]]


def _callers_refusal(call: str, *, closed: bool, status: TransactionStatus, autocommit: bool) -> str | None:
    """Why the caller's connection cannot carry an enqueue into its transaction, or None if it can:
    one text for ``enqueue(conn=...)`` and ``enqueue_async(conn=...)`` (``call`` names which).

    >>> idle = TransactionStatus.IDLE
    >>> _callers_refusal("enqueue(conn=...)", closed=False, status=idle, autocommit=False) is None  # begins one
    True
    >>> print(_callers_refusal("enqueue_async(conn=...)", closed=False, status=idle, autocommit=True))
    enqueue_async(conn=...) joins the caller's transaction, but this connection has none open (autocommit): ...
    """
    if closed or status == TransactionStatus.UNKNOWN:
        return f"{call} was given a closed connection"
    if status == TransactionStatus.INERROR:
        return f"the transaction of the connection given to {call} has already failed; roll it back first"
    if status == TransactionStatus.ACTIVE:
        return f"the connection given to {call} is busy running another query"
    if autocommit and status == TransactionStatus.IDLE:
        wrap = "async with" if call.startswith("enqueue_async") else "with"
        return (f"{call} joins the caller's transaction, but this connection has none open (autocommit): "
                f"wrap the work in `{wrap} conn.transaction():`")
    return None


def _savepoint_to_undo(status: TransactionStatus) -> bool:
    """Whether a failed enqueue in the caller's transaction can still be undone by its savepoint
    (not when the connection was lost or the transaction ended under it)."""
    return status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)


class _NewJobs:
    """Jobs a batch insert created, built from what was inserted plus what the database decided.

    A new row holds exactly its insert values and the table's defaults, so nothing else needs to
    travel back (tests/postgres compare these jobs with the stored ones).
    """

    _STATES: dict[str, State] = {s.value: s for s in State}

    def __init__(self, items: Sequence[InsertParams]) -> None:
        self.items = {i.key: i for i in items}
        self._names: dict[str | None, list[str]] = {}
        self._times: dict[float, datetime] = {}

    def add(self, rows: Sequence[tuple[Any, ...]], into: dict[str, Job]) -> None:
        """``rows`` as job_insert returns them: ``(id, key, state, run_at, created_at, ...)``."""
        items, names_seen, times, states = self.items, self._names, self._times, self._STATES
        chosen = [items[row[1]] for row in rows]
        # Plain arguments come as the values the app encoded; the others are decoded, all in one
        # json.loads of an array, far cheaper than one call a row.
        odd = [item.payload for item in chosen if item.values is None]
        decoded = iter(json.loads("[" + ",".join(odd) + "]") if odd else ())
        for (job_id, key, state, run_at, created_at, *_), item in zip(rows, chosen, strict=True):
            if item.values is not None:
                args, kwargs = item.values
            else:
                payload = next(decoded)
                args, kwargs = payload.get("args", []), payload.get("kwargs", {})
            names = names_seen.get(item.arg_names)
            if names is None:
                names = names_seen[item.arg_names] = json.loads(item.arg_names) if item.arg_names else []
            created = times.get(created_at)
            if created is None:
                created = times[created_at] = datetime.fromtimestamp(created_at, UTC)
            when = times.get(run_at)
            if when is None:
                when = times[run_at] = datetime.fromtimestamp(run_at, UTC)
            into[key] = Job(id=job_id, key=key, name=item.name, queue=item.queue, state=states[state],
                            args=list(args), kwargs=dict(kwargs), arg_names=list(names), attempt=0,
                            max_attempts=item.max_attempts, runs=0, deferrals=0, lost=0, run_at=when,
                            created_at=created, updated_at=created, finished_at=None,
                            fingerprint=item.fingerprint, created=True, priority=item.priority)


# Fork safety: a child must never use, nor close, the connections it inherited (closing one sends
# the server a Terminate message on the parent's socket). After a fork every store points its
# inherited sockets at /dev/null and starts afresh.
_STORES: weakref.WeakSet[PostgresCore] = weakref.WeakSet()
_INHERITED: list[Any] = []  # objects of the parent, kept alive so they are never finalised mid-run


def _after_fork_in_child() -> None:
    for store in list(_STORES):
        store._forget_inherited()


os.register_at_fork(after_in_child=_after_fork_in_child)


class PostgresCore(CoreCommon, ChildrenCommon, DashboardQueries, MovesByQuery):
    """The core of the :class:`~firesafe.store.contract.Store` (and
    :class:`~firesafe.store.contract.ListenStore`) in a PostgreSQL schema: jobs, attempts, events, leases,
    LISTEN/NOTIFY and the dashboard's reads. :class:`firesafe.stores.PostgresStore` adds each part's storage."""

    dialect = "postgres"
    concurrent_writers = True
    supports_listen = True  # LISTEN/NOTIFY: see listen
    path: str | None = None  # no file: the server keeps the data

    if TYPE_CHECKING:  # provided by the alerts part's storage (firesafe/alerts/store_postgres.py), mixed in above
        def _outbox_dead(self, conn: psycopg.Connection[Any], job_ids: Sequence[int], now: float | None) -> None: ...

        def _write_with_outbox(self, name: str, params: dict[str, Any],
                               dead_ids: Sequence[int]) -> list[dict[str, Any]]: ...

    def __init__(self, url: str, clock: Clock | None = None, *, pool_min: int = 1, pool_max: int = 8,
                 timeout: float = 5.0, application_name: str = "firesafe") -> None:
        self.url = url
        self.conninfo, self.schema, self.pooler, self.direct = split_url(url)
        self.where = f"{_where(url)} (schema {self.schema})"
        self.listen_where = _where(self.direct) if self.direct else self.where  # the listener's server
        self.clock = clock  # None: the database's clock (invariant 5)
        self.channel = f"{self.schema}_jobs"
        if pool_min < 0 or pool_max < max(1, pool_min):
            raise ConfigError("pool sizes need 0 <= pool_min <= pool_max and pool_max >= 1")
        self.pool_min, self.pool_max, self.timeout = pool_min, pool_max, timeout
        self._connect_kwargs = self._kwargs_for(self.conninfo, application_name, timeout)
        # Behind a transaction-mode pooler, each transaction may run on another server connection, so
        # nothing may outlive one: psycopg then never prepares statements on the server (a name that
        # one server connection holds and another lacks, or already holds for another client).
        # Everything else the store sends is transaction-scoped (SET LOCAL, pg_advisory_xact_lock).
        # LISTEN needs a session of its own: on the direct URL, or not at all (workers poll).
        self._direct_kwargs: dict[str, Any] | None = None
        if self.pooler is not None:
            self._connect_kwargs["prepare_threshold"] = None
            self.supports_listen = self.direct is not None
            if self.direct is not None:  # the store URL's application_name, unless direct= gives one
                name = self._connect_kwargs.get("application_name") or dict(
                    parse_qsl(urlsplit(self.conninfo).query))["application_name"]
                self._direct_kwargs = self._kwargs_for(self.direct, name, timeout)
                password = conninfo_to_dict(self.conninfo).get("password")
                if password:  # the store URL's: direct= names none (see split_url)
                    self._direct_kwargs["password"] = password
        self.q = _render(self.schema, self.channel)
        self._claim_texts: dict[tuple[int, bool], str] = {}
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conns: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self._listeners: weakref.WeakSet[Listener] = weakref.WeakSet()
        _STORES.add(self)

    def __repr__(self) -> str:
        return f"<PostgresStore {self.where}>"

    @staticmethod
    def _kwargs_for(conninfo: str, application_name: str, timeout: float) -> dict[str, Any]:
        """psycopg's connect arguments for ``conninfo``: the store's defaults where the URL sets none."""
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        given = dict(parse_qsl(urlsplit(conninfo).query))
        if "application_name" not in given:
            kwargs["application_name"] = application_name
        if "connect_timeout" not in given:
            kwargs["connect_timeout"] = max(1, round(timeout))
        return kwargs

    # -- connections -------------------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        self._conns.add(conn)

    def _connect_direct(self) -> psycopg.Connection[Any]:
        """A new connection outside the pool that may keep session state (LISTEN): to the server
        itself (``?direct=``) behind a pooler; the caller closes it."""
        if self.pooler is None:
            conn = psycopg.connect(self.conninfo, **self._connect_kwargs)
        elif self.direct is not None and self._direct_kwargs is not None:
            conn = psycopg.connect(self.direct, **self._direct_kwargs)
        else:
            raise ConfigError(self._no_direct("LISTEN"))
        self._conns.add(conn)
        return conn

    def _no_direct(self, what: str) -> str:
        return (f"PostgreSQL store {self.where} is behind a transaction-mode pooler (?pooler=transaction) with "
                f"no ?direct= URL of the server, so it cannot {what}; workers poll instead (see docs/postgres.md)")

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for migrations: the pool's, or behind a pooler the direct URL's if given.
        (Migrations hold only transaction-scoped state, so through the pooler is safe too; the direct
        URL keeps long DDL off the pooler's few server connections.)"""
        if self.direct is None:
            with self._conn() as c:
                yield c
            return
        try:
            conn = self._connect_direct()
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store {self.where}: its ?direct= URL is unreachable: "
                             f"{_first_line(exc)}") from None
        try:
            with conn:
                yield conn
        except psycopg.Error as exc:
            raise self._explain(exc) from exc

    def _get_pool(self) -> ConnectionPool:
        if self._pid != os.getpid():
            self._forget_inherited()
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    self._check_reachable()
                    # reconnect_timeout: a lost connection is replaced in the background with
                    # backoff (1 s, 2 s, 4 s, ...), given up after the store's timeout; later demand
                    # starts afresh. Without it the pool's own pauses would grow to minutes during
                    # an outage, and keep it away from a server (a promoted standby) that is back.
                    pool = ConnectionPool(
                        self.conninfo, kwargs=self._connect_kwargs, min_size=self.pool_min,
                        max_size=self.pool_max, open=False, configure=self._configure, timeout=self.timeout,
                        reconnect_timeout=self.timeout, name=f"firesafe-{self.schema}")
                    pool.open(wait=False)
                    self._pool = pool
        return pool

    def _check_reachable(self) -> None:
        """Before a pool is made: one plain connection, so a server that is down or refuses us is
        reported at once with its reason, not after the pool's timeout of retries."""
        try:
            psycopg.connect(self.conninfo, **self._connect_kwargs).close()
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store {self.where} is unreachable: {_first_line(exc)}") from None

    def _forget_inherited(self) -> None:
        """In a forked child: drop the parent's pool and connections without touching their sockets."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._lock = threading.Lock()
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in list(self._conns):
                try:
                    fd = conn.pgconn.socket
                except Exception:  # already closed
                    continue
                os.dup2(devnull, fd)
                _INHERITED.append(conn)
        finally:
            os.close(devnull)
        self._conns = weakref.WeakSet()
        if self._pool is not None:
            _INHERITED.append(self._pool)
            self._pool = None
        self._listeners = weakref.WeakSet()

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection; database errors come out as :class:`StoreError`."""
        pool = self._get_pool()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self._unreachable(exc) from exc
        except psycopg.Error as exc:
            if _plan_changed(exc) or _read_only(exc):
                self._renew_connections()
            raise self._explain(exc) from exc
        except UnicodeError as exc:  # text that has no UTF-8 (a lone surrogate), refused before it was sent
            raise self._refused(exc) from exc

    def _refused(self, exc: Exception) -> StoreDataError:
        """The error for data the store refused (a NUL in text, text that is not UTF-8, a value out of
        range): not a fault of the store, so a retry of the same write would be refused again."""
        err = StoreDataError(f"PostgreSQL store {self.where} refused the data it was given "
                             f"({type(exc).__name__}: {for_store(_first_line(exc))[:300]})")
        err.__cause__ = exc
        return err

    def _renew_connections(self) -> None:
        """Replace every pooled connection (those in use when they come back). A table's columns
        changed under this process (a newer firesafe migrated the schema): the statements each
        connection prepared still return the old columns, and the server refuses to run them. Or
        the server turned out read-only (a standby): new connections look for the primary again."""
        pool = self._pool
        if pool is not None:
            try:
                pool.drain()
            except Exception as exc:  # pragma: no cover - best effort: the next failure tries again
                log.debug("could not renew the pool's connections: %s", exc)

    def _unreachable(self, exc: Exception) -> StoreError:
        why = str(exc)
        try:  # the pool only says it timed out: find out why a connection fails
            psycopg.connect(self.conninfo, **{**self._connect_kwargs, "connect_timeout": 2}).close()
        except psycopg.Error as cause:
            why = _first_line(cause)
        else:
            why = (f"no pooled connection came free within {self.timeout:g}s (all {self.pool_max} busy, or the "
                   "pool still reconnecting after an outage)")
        return StoreError(f"PostgreSQL store {self.where} is unreachable: {why}")

    def _explain(self, exc: psycopg.Error, *, callers: bool = False) -> StoreError:
        """``exc`` as a StoreError that says what happened; ``callers``: it came from the caller's own
        connection (enqueue(conn=...)), so the store's pool is not to blame."""
        if isinstance(exc, psycopg.DataError):  # SQLSTATE class 22, or a NUL psycopg refused to send
            return self._refused(exc)
        text = _first_line(exc)
        if _plan_changed(exc):
            msg = (f"PostgreSQL store {self.where}: its tables changed under this process (a newer firesafe "
                   f"migrated the schema?): {text}; its connections are renewed, so a retry works")
        elif isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)):
            msg = (f"PostgreSQL store {self.where} has no firesafe tables yet ({text}); "
                   "run `firesafe migrate` (or open the App with auto_migrate=True)")
        elif _read_only(exc):
            msg = (f"PostgreSQL store {self.where} is read-only (a standby, or a primary being demoted in a "
                   f"failover): {text}; its connections are renewed, so a retry reaches the primary once there "
                   "is one (name every server in the URL, with target_session_attrs=read-write)")
        elif isinstance(exc, psycopg.errors.TransactionRollback):  # deadlock, serialization failure
            msg = f"PostgreSQL store {self.where}: {text} (a clash with a concurrent transaction; nothing was kept)"
        elif isinstance(exc, psycopg.OperationalError):
            if self._pool is not None and not callers:  # drop every idle connection that went down with it
                try:
                    self._pool.check()
                except Exception as check_exc:  # pragma: no cover - best effort
                    log.debug("pool check failed: %s", check_exc)
            msg = f"PostgreSQL store {self.where} failed: {text} (the connection was lost or the server refused)"
        else:
            msg = f"PostgreSQL store {self.where}: {text}"
        err = StoreError(msg)
        err.__cause__ = exc
        return err

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        with self._conn() as c, c.transaction():
            yield c

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        with self._conn() as c:
            return c.execute(self.q[name], params).rowcount

    def _exec_many(self, c: psycopg.Connection[Any], name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            with c.cursor() as cur:  # psycopg pipelines executemany: one round trip for the batch
                cur.executemany(self.q[name], [dict(r) for r in rows])

    def _list(self, values: Iterable[Any]) -> list[Any]:
        return list(values)

    def _read(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._conn() as c:
            return c.execute(self.q[name], params or {}).fetchall()

    def _write(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._conn() as c:
            cur = c.execute(self.q[name], params)
            return cur.fetchall() if cur.description else []

    def _now(self) -> float | None:
        """The ``now`` parameter: the injected clock, else NULL (the database's clock)."""
        return None if self.clock is None else self.clock.now()

    def now(self) -> float:
        if self.clock is not None:
            return self.clock.now()
        return float(self._read("clock_now")[0]["now"])

    def close(self) -> None:
        for listener in list(self._listeners):
            listener.close()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    # -- schema ------------------------------------------------------------------------------
    def _applied(self) -> set[int] | None:
        with self._session() as c:
            if not c.execute(self.q["migrations_present"]).fetchall()[0]["present"]:
                return None
            return {r["version"] for r in c.execute(self.q["migrations_applied"])}

    def migrate(self, *, allow_other_tables: bool = False) -> list[int]:
        """Create or upgrade firesafe's schema; safe when many processes call it at once.

        ``allow_other_tables`` is SQLite's: firesafe's tables live in a schema of their own here.
        """
        wanted = queries.migrations("postgres")
        done = self._applied()
        if done:
            queries.check_version(self.where, self.dialect, max(done))
        if done is not None and all(v in done for v, _ in wanted):
            return []
        applied_now: list[int] = []
        with self._session() as c, c.transaction():
            c.execute(self.q["migrate_lock"], {"lock": f"firesafe.migrate:{self.schema}"})
            if not c.execute(self.q["schema_present"], {"schema": self.schema}).fetchall()[0]["present"]:
                c.execute(self.q["schema_create"])
            c.execute(self.q["migrations_create"])
            done = {r["version"] for r in c.execute(self.q["migrations_applied"])}
            queries.check_version(self.where, self.dialect, max(done, default=0))  # a newer one won the lock
            for version, text in wanted:
                if version in done:
                    continue
                c.execute(self.q["migrations_search_path"])
                c.execute(text)  # no parameters: sent as one multi-statement script
                c.execute(self.q["migration_record"], {"version": version, "now": self._now()})
                applied_now.append(version)
        if applied_now:
            log.info("migrated %s to version %d", self.where, applied_now[-1])
        return applied_now

    def schema_version(self) -> int:
        done = self._applied()
        return max(done, default=0) if done else 0

    # -- jobs --------------------------------------------------------------------------------
    #: Rows per insert statement; larger batches are split, and pipelined when the store owns the
    #: connection, so the server inserts one chunk while the client prepares the next.
    INSERT_CHUNK = 1000
    #: From this many keys, a batch is first inserted as if all its keys were new (job_insert_new).
    FRESH_MIN = 64

    def job_insert_many(self, items: Sequence[InsertParams], conn: Any = None) -> list[Job]:
        unique = dedupe_batch(items)
        if not unique:
            return []
        if conn is None and len(unique) == 1:
            # One key: a statement of its own is already all or nothing (it inserts the row or finds
            # the key taken), so it needs no explicit transaction: one round trip.
            with self._conn() as c:
                stored = self._insert(c, unique, prepare=None, pipeline=False)
        elif conn is None:
            with self._conn() as c, c.transaction():
                stored = self._insert(c, unique, prepare=None, pipeline=True)
        else:
            stored = self._insert_in_callers_transaction(conn, unique)
        return in_batch_order(items, stored)

    def _insert_params(self, part: Sequence[InsertParams], ids: list[int] | None,
                       now: float | None, parent_id: int | None) -> dict[str, Any]:
        return {
            "id": None if ids is None else _number_array(ids),
            "key": _text_array([i.key for i in part]), "name": _text_array([i.name for i in part]),
            "queue": _text_array([i.queue for i in part]),
            "fingerprint": _text_array([i.fingerprint for i in part]),
            "payload": _text_array([i.payload for i in part]),
            "arg_names": _text_array([i.arg_names for i in part]),
            "max_attempts": _number_array([i.max_attempts for i in part]),
            "run_at": _number_array([i.run_at for i in part]),
            "delay": _number_array([float(i.delay) for i in part]),
            "trace_context": _text_array([i.trace_context for i in part])
            if any(i.trace_context is not None for i in part) else None,
            "priority": _number_array([i.priority for i in part]) if any(i.priority for i in part) else None,
            "now": now, "channel": self.channel, "parent_id": parent_id,
        }

    def _insert_plan(self, unique: list[InsertParams], *, pipelined: bool,
                     parent_id: int | None = None) -> Generator[_Statement | _Pipelined, Any, dict[str, Job]]:
        """The insert of ``unique`` as the statements it runs, one at a time, and what it decides from
        their rows: the jobs by key, new or stored. It sends each statement out (a :class:`_Statement`,
        answered with its rows; with ``pipelined``, one :class:`_Pipelined` for all the chunks, answered
        with the jobs they created) and does no I/O itself, so the sync and async drivers
        (:meth:`_insert`, :meth:`_insert_async`) run one plan: what they write and decide cannot differ.
        """
        stored: dict[str, Job] = {}
        size = self.INSERT_CHUNK
        if len(unique) == 1:
            def chunks() -> Iterator[dict[str, Any]]:
                yield self._insert_params(unique, None, self._now(), parent_id)
        else:  # ids in enqueue order, rows in key order, one time for the batch (see job_insert)
            rows = yield _Statement("job_ids_next", {"n": len(unique), "now": self._now()})
            ids, now = rows[0]["ids"], rows[0]["now"]
            order = sorted(range(len(unique)), key=lambda k: unique[k].key)

            def chunks() -> Iterator[dict[str, Any]]:  # built while the server inserts
                for s in range(0, len(order), size):
                    yield self._insert_params([unique[k] for k in order[s:s + size]],
                                              [ids[k] for k in order[s:s + size]], now, parent_id)
        if pipelined:
            stored = yield _Pipelined(chunks)
        else:
            new = _NewJobs(unique)
            for params in chunks():
                new.add((yield _Statement("job_insert", params, tuples=True)), stored)
        if len(stored) < len(unique):
            # Keys already taken: read them in a new statement, which also sees keys that a
            # concurrent enqueue committed while the insert ran (it waited for them).
            taken = [i.key for i in unique if i.key not in stored]
            for row in (yield _Statement("job_by_keys", {"keys": _text_array(taken)})):
                stored[row["key"]] = Job.from_row(row)
            if len(stored) < len(unique):  # reserved: their jobs' history was pruned
                unseen = [k for k in taken if k not in stored]
                for row in (yield _Statement("reserved_by_keys", {"keys": _text_array(unseen)})):
                    stored[row["key"]] = Job.from_reserved_row(row)
            if len(stored) < len(unique):
                unseen = sorted(set(taken) - set(stored))
                raise StoreError(
                    f"PostgreSQL store {self.where}: key(s) {', '.join(unseen[:5])} were taken by a "
                    "concurrent enqueue that this transaction cannot see (REPEATABLE READ or "
                    "SERIALIZABLE isolation?); retry the transaction")
        check_existing(unique, stored)  # raises: the caller rolls this batch back
        return stored

    def _insert_in(self, c: psycopg.Connection[Any], unique: list[InsertParams],
                   parent_id: int | None = None) -> dict[str, Job]:
        return self._insert(c, unique, prepare=None, pipeline=True, parent_id=parent_id)

    def _insert(self, c: psycopg.Connection[Any], unique: list[InsertParams], *, prepare: bool | None,
                pipeline: bool, parent_id: int | None = None) -> dict[str, Job]:
        """Run :meth:`_insert_plan` on ``c``; large batches of the store's own are pipelined."""
        plan = self._insert_plan(unique, pipelined=pipeline and len(unique) >= self.FRESH_MIN, parent_id=parent_id)
        # Binary results: jobs rows decode several times faster than as text (floats above all); the
        # inserts' as tuples, the cheapest to decode.
        with c.cursor(row_factory=dict_row, binary=True) as cur, \
                c.cursor(row_factory=tuple_row, binary=True) as tcur:
            answer: Any = None
            while True:
                try:
                    step = plan.send(answer)
                except StopIteration as done:
                    return cast("dict[str, Job]", done.value)
                if isinstance(step, _Pipelined):
                    answer = self._insert_all_pipelined(c, step, unique, prepare)
                else:
                    answer = (tcur if step.tuples else cur).execute(self.q[step.query], step.params,
                                                                    prepare=prepare).fetchall()

    def _insert_all_pipelined(self, c: psycopg.Connection[Any], step: _Pipelined, unique: list[InsertParams],
                              prepare: bool | None) -> dict[str, Job]:
        stored: dict[str, Job] = {}
        try:
            # Most large batches are all new keys: insert them without ON CONFLICT, under a
            # savepoint, in a pipeline; if a key is taken, undo that and take the general path.
            with c.transaction():
                self._insert_pipelined(c, "job_insert_new", step.chunks(), unique, stored, prepare)
        except psycopg.errors.UniqueViolation:
            stored.clear()
            self._insert_pipelined(c, "job_insert", step.chunks(), unique, stored, prepare)
        return stored

    def _insert_pipelined(self, c: psycopg.Connection[Any], query: str, chunks: Iterable[dict[str, Any]],
                          unique: list[InsertParams], stored: dict[str, Job], prepare: bool | None) -> None:
        """Send the chunks in one pipeline: while the server inserts chunk k, the client builds chunk
        k+1 and turns the rows of chunk k-1 into jobs. (A pipeline's fetch waits for every statement
        sent, so each chunk is fetched before the next one is sent.)"""
        new = _NewJobs(unique)
        with c.pipeline(), c.cursor(row_factory=tuple_row, binary=True) as pcur:
            todo = iter(chunks)
            params = next(todo, None)
            done: list[tuple[Any, ...]] = []
            while params is not None:
                pcur.execute(self.q[query], params, prepare=prepare)
                params = next(todo, None)
                new.add(done, stored)
                done = pcur.fetchall()
            new.add(done, stored)

    def _insert_in_callers_transaction(self, conn: Any, unique: list[InsertParams]) -> dict[str, Job]:
        """Write inside the caller's open transaction: the jobs exist iff the caller commits."""
        call = "enqueue(conn=...)"
        if not isinstance(conn, psycopg.Connection):
            is_async = isinstance(conn, psycopg.AsyncConnection)
            also = " (use `await job.enqueue_async(..., conn=...)`)" if is_async else ""
            raise InvalidInput(f"{call} takes a psycopg 3 Connection (sync), not {type(conn).__name__}{also}")
        why = _callers_refusal(call, closed=conn.closed, status=conn.info.transaction_status,
                               autocommit=conn.autocommit)
        if why is not None:
            raise InvalidInput(why)
        # A framework may have set client-side cursors as the connection's default (Django does), which
        # cannot read binary results: the insert uses psycopg's own cursors, and the default comes back.
        factory, conn.cursor_factory = conn.cursor_factory, psycopg.Cursor
        try:
            # The caller's connection: no server-side prepared statements left behind on it.
            conn.execute(self.q["savepoint"], prepare=False)
            try:
                stored = self._insert(conn, unique, prepare=False, pipeline=False)
            except BaseException:
                if _savepoint_to_undo(conn.info.transaction_status):
                    conn.execute(self.q["savepoint_rollback"], prepare=False)
                    conn.execute(self.q["savepoint_release"], prepare=False)
                raise
            conn.execute(self.q["savepoint_release"], prepare=False)
        except psycopg.errors.UndefinedTable as exc:
            raise self._not_the_stores_database(call, exc) from exc
        except psycopg.Error as exc:
            raise self._explain(exc, callers=True) from exc
        finally:
            conn.cursor_factory = factory
        return stored

    async def job_insert_many_async(self, items: Sequence[InsertParams], conn: Any) -> list[Job]:
        unique = dedupe_batch(items)
        if not unique:
            return []
        return in_batch_order(items, await self._insert_in_callers_transaction_async(conn, unique))

    async def _insert_in_callers_transaction_async(self, conn: Any, unique: list[InsertParams]) -> dict[str, Job]:
        """:meth:`_insert_in_callers_transaction` on a psycopg ``AsyncConnection``: the same checks, the
        same savepoint, the same plan (:meth:`_insert_plan`), awaited on the caller's event loop."""
        call = "enqueue_async(conn=...)"
        if not isinstance(conn, psycopg.AsyncConnection):
            also = " (use `job.enqueue(..., conn=...)`)" if isinstance(conn, psycopg.Connection) else ""
            raise InvalidInput(f"{call} takes a psycopg 3 AsyncConnection, not {type(conn).__name__}{also}")
        why = _callers_refusal(call, closed=conn.closed, status=conn.info.transaction_status,
                               autocommit=conn.autocommit)
        if why is not None:
            raise InvalidInput(why)
        factory, conn.cursor_factory = conn.cursor_factory, psycopg.AsyncCursor  # as in the sync twin
        try:
            await conn.execute(self.q["savepoint"], prepare=False)
            try:
                stored = await self._insert_async(conn, unique)
            except BaseException:
                if _savepoint_to_undo(conn.info.transaction_status):
                    await conn.execute(self.q["savepoint_rollback"], prepare=False)
                    await conn.execute(self.q["savepoint_release"], prepare=False)
                raise
            await conn.execute(self.q["savepoint_release"], prepare=False)
        except psycopg.errors.UndefinedTable as exc:
            raise self._not_the_stores_database(call, exc) from exc
        except psycopg.Error as exc:
            raise self._explain(exc, callers=True) from exc
        finally:
            conn.cursor_factory = factory
        return stored

    async def _insert_async(self, c: psycopg.AsyncConnection[Any], unique: list[InsertParams]) -> dict[str, Job]:
        """Run :meth:`_insert_plan` on an async connection, one statement at a time (no pipeline)."""
        plan = self._insert_plan(unique, pipelined=False)
        async with c.cursor(row_factory=dict_row, binary=True) as cur, \
                c.cursor(row_factory=tuple_row, binary=True) as tcur:
            answer: Any = None
            while True:
                try:
                    step = plan.send(answer)
                except StopIteration as done:
                    return cast("dict[str, Job]", done.value)
                assert isinstance(step, _Statement)  # only the store's own connection pipelines
                statement = tcur if step.tuples else cur
                await statement.execute(self.q[step.query], step.params, prepare=False)
                answer = await statement.fetchall()

    def _not_the_stores_database(self, call: str, exc: psycopg.Error) -> StoreError:
        return StoreError(
            f"the connection given to {call} sees no firesafe tables in schema {self.schema!r} "
            f"({exc}); is it connected to the store's database ({self.where})?")

    def job_get(self, key: str, *, full: bool = False) -> Job | None:
        with self._conn() as c:
            row = c.execute(self.q["job_by_key"], {"key": key}).fetchone()
            if row is None:
                return None
            job = Job.from_row(row)
            if full:
                job.trace = [attempt_from_row(r) for r in c.execute(self.q["attempts_of_job"], {"job_id": job.id})]
                job.events = [event_from_row(r) for r in c.execute(self.q["events_of_job"], {"job_id": job.id})]
        return job

    def _claim_params(self, params: ClaimParams, token: str) -> dict[str, Any]:
        return {"token": token, "now": self._now(), "lease": params.lease, "worker": params.worker,
                "queues": _text_array(params.queues)}

    def _claim_sql(self, params: ClaimParams) -> str:
        """job_claim with its row limit and its test of ``lost`` written in (see the query's comment):
        one text, so one prepared statement, per limit and kind of claim (limits rounded, see
        :func:`_claim_limit`)."""
        limit, suspects = params.limit, bool(params.suspects)
        text = self._claim_texts.get((limit, suspects))
        if text is None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                raise ValueError(f"a claim's limit must be a whole number >= 0, not {limit!r}")
            lost = "j.lost > 0" if suspects else "j.lost = 0"
            text = self.q["job_claim"].replace("{limit}", str(_claim_limit(limit))).replace("{lost}", lost)
            self._claim_texts[(limit, suspects)] = text
        return text

    def job_claim(self, params: ClaimParams) -> list[Claimed]:
        token = uuid.uuid4().hex
        with self._conn() as c, c.cursor(row_factory=tuple_row, binary=True) as cur:
            rows = cur.execute(self._claim_sql(params), self._claim_params(params, token)).fetchall()
        return [Claimed(Job.from_claim_values(r, params.worker), token) for r in rows]

    def job_finish_and_claim(self, finishes: Sequence[FinishParams],
                             claim: ClaimParams) -> tuple[list[bool], list[Claimed]]:
        if not finishes:
            return [], self.job_claim(claim)
        token = uuid.uuid4().hex
        once, firsts = _once_each(finishes)
        now = self._now()
        # The claim's rows as tuples: see Job.from_claim_values.
        with self._conn() as c, c.cursor(row_factory=tuple_row, binary=True) as claimed:
            # One round trip: BEGIN, generic plans (see plan_generic), the outcomes (children counted
            # off their parents), their alerts (see job_finish_many), the claim, COMMIT.
            with c.pipeline(), c.transaction():
                c.execute(self.q["plan_generic"])
                finished = self._finish_in(c, once, now)
                self._outbox_dead(c, [i.job_id for i in once if i.state == State.DEAD], now)
                claimed.execute(self._claim_sql(claim), self._claim_params(claim, token))
            applied = {r["id"] for cur in finished for r in cur.fetchall()}
            rows = claimed.fetchall()
        return _applied_per_item(finishes, firsts, applied), [Claimed(Job.from_claim_values(r, claim.worker), token)
                                                              for r in rows]

    def job_finish_many(self, items: Sequence[FinishParams]) -> list[bool]:
        if not items:
            return []
        # Alerts: jobs going dead get their dead_letter event in the same transaction (invariant 4).
        once, firsts = _once_each(items)
        now = self._now()
        dead = [i.job_id for i in once if i.state == State.DEAD]
        if any(i.parent_id is not None for i in once):  # perhaps children and their parents together
            with self._conn() as c, c.transaction():
                rows = [r for cur in self._finish_in(c, once, now) for r in cur.fetchall()]
                self._outbox_dead(c, dead, now)
        else:
            rows = self._write_with_outbox("job_finish_plain", self._finish_params(once, now), dead)
        return _applied_per_item(items, firsts, {r["id"] for r in rows})

    def _finish_in(self, c: psycopg.Connection[Any], once: Sequence[FinishParams],
                   now: float | None) -> list[psycopg.Cursor[Any]]:
        """Send job_finish for ``once`` in the open transaction ``c``: one statement (without its
        count-down for a batch without children), or, when the batch holds a job and one of its
        children, one per generation, children first (see job_finish); the cursors to read the
        applied ids from."""
        if all(i.parent_id is None for i in once):
            return [c.execute(self.q["job_finish_plain"], self._finish_params(once, now))]
        return [c.execute(self.q["job_finish"], self._finish_params(part, now)) for part in _generations(once)]

    def _finish_params(self, items: Sequence[FinishParams], now: float | None) -> dict[str, Any]:
        return {
            "job_id": _number_array([i.job_id for i in items]), "token": _text_array([i.token for i in items]),
            "seq": _number_array([i.seq for i in items]), "state": _text_array([i.state for i in items]),
            "outcome": _text_array([i.outcome for i in items]), "delay": _number_array([i.delay for i in items]),
            "given_back": _number_array([i.given_back for i in items]),
            "result": _text_array([i.result for i in items]),
            "error_type": _text_array([i.error_type for i in items]),
            "message": _text_array([i.message for i in items]),
            "traceback": _text_array([i.traceback for i in items]),
            "reason": _text_array([i.reason for i in items]), "detail": _text_array([i.detail for i in items]),
            "now": now, "channel": self.channel}

    def job_heartbeat_many(self, items: Sequence[tuple[int, str]], lease: float) -> dict[int, bool]:
        if not items:
            return {}
        rows = self._write("job_heartbeat", {"job_id": _number_array([i for i, _ in items]),
                                             "token": _text_array([t for _, t in items]),
                                             "lease": lease, "now": self._now()})
        return {r["id"]: bool(r["cancel_requested"]) for r in rows}

    def worker_process_gone(self, prefix: str, detail: dict[str, Any] | None = None) -> int:
        check_worker_prefix(prefix)
        with self._conn() as c, c.transaction():
            ended = len(c.execute(self.q["job_expire_process"], {
                "prefix": prefix, "now": self._now(), "detail": json.dumps(detail or {})}).fetchall())
            c.execute(self.q["worker_remove_process"], {"prefix": prefix})
            c.execute(self.q["leader_release_process"], {"prefix": prefix})
        return ended

    def job_rescue_many(self, items: Sequence[RescueParams]) -> list[bool]:
        if not items:
            return []
        once, firsts = _once_each(items)
        now = self._now()
        params = {
            "job_id": _number_array([i.job_id for i in once]), "token": _text_array([i.token for i in once]),
            "seq": _number_array([i.seq for i in once]), "state": _text_array([i.state for i in once]),
            "delay": _number_array([i.delay for i in once]), "reason": _text_array([i.reason for i in once]),
            "message": _text_array([i.message for i in once]), "now": now}
        dead = [i.job_id for i in once if i.state == State.DEAD]  # alerts: see job_finish_many
        ended = [i.job_id for i in once if i.state in FINISHED]
        if ended:  # a child that ended is counted off its parent in the same transaction
            with self._conn() as c, c.transaction():
                rows = c.execute(self.q["job_rescue"], params).fetchall()
                self._outbox_dead(c, dead, now)
                self._settle(c, [r["id"] for r in rows], now)
        else:
            rows = self._write_with_outbox("job_rescue", params, dead)
        return _applied_per_item(items, firsts, {r["id"] for r in rows})

    @staticmethod
    def _filter_params(f: JobFilter) -> dict[str, Any]:
        return {"state": f.state, "name": f.name, "queue": f.queue, "error_type": f.error_type,
                "since": f.since, "until": f.until, "keys": _text_array(f.keys) if f.keys is not None else None,
                "limit": f.limit, "offset": f.offset}

    def job_list(self, filt: JobFilter) -> list[Job]:
        with self._conn() as c:
            rows = c.execute(self.q["job_list"], self._filter_params(filt), binary=True).fetchall()
        return [Job.from_row(r) for r in rows]

    def dead_list(self, filt: DeadFilter) -> DeadPage:
        with self._conn() as c:
            rows = c.execute(self.q["dead_list"], dead_params(filt), binary=True).fetchall()
        return dead_page(rows, filt.limit, Job.from_row)

    def _move_many(self, query: str, kind: str, ids: Sequence[int], actor: str, detail: str | None) -> list[int]:
        if not ids:
            return []
        now = self._now()
        params = {"ids": _number_array(ids), "kind": kind, "actor": actor, "detail": detail, "now": now,
                  "channel": self.channel}
        if query in ("job_cancel_waiting", "job_replay"):  # moves that end children or put them back
            with self._conn() as c, c.transaction():
                rows = c.execute(self.q[query], params).fetchall()
                self._recount(c, query, [r["id"] for r in rows], now)
        else:
            rows = self._write(query, params)
        moved = {r["id"] for r in rows}
        return [i for i in ids if i in moved]

    def job_delete_finished(self, state: State, older_than: float, limit: int = 1000) -> int:
        with self._conn() as c:
            return c.execute(self.q["job_delete_finished"], {
                "state": str(state), "older_than": older_than, "limit": limit, "now": self._now()}).rowcount

    def job_pending(self, queues: Sequence[str]) -> Pending:
        r = self._read("job_pending", {"now": self._now(), "queues": _text_array(queues)})[0]
        return Pending(r["runnable"], r["running"], r["next_at"], r["suspects"])

    # -- workers and leaders -----------------------------------------------------------------
    def leader_acquire(self, name: str, holder: str, ttl: float) -> bool:
        return bool(self._write("leader_acquire", {"name": name, "holder": holder, "ttl": ttl, "now": self._now()}))

    # -- wake-ups ----------------------------------------------------------------------------
    def listen(self, queues: Sequence[str], wake: Callable[[], None] | None = None) -> Listener:
        """Start listening for new runnable jobs in ``queues``; ``wake`` is called for each arrival.

        The listener also calls ``wake`` whenever it (re)connects, since jobs may have arrived while
        it was not listening. Close it with :meth:`Listener.close`.
        """
        if not self.supports_listen:
            raise ConfigError(self._no_direct("LISTEN"))
        if self._pid != os.getpid():
            self._forget_inherited()
        listener = Listener(self, queues, wake)
        self._listeners.add(listener)
        return listener

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job arrives in ``queues`` (True) or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        listener = self.listen(queues)
        try:
            if not listener.ready(timeout):
                return False
            listener.wait(0)  # forget the wake-up every (re)connect gives
            return listener.wait(max(0.0, deadline - time.monotonic()))
        finally:
            listener.close()


class Listener:
    """A background thread on its own connection, LISTENing to a store's wake-up channel.

    Guarantees: a notification for one of its queues calls ``wake`` within milliseconds; after a
    lost connection it reconnects with backoff and calls ``wake`` (polling covers the gap).
    """

    POLL = 0.25  # how often the thread looks at its stop flag while waiting for notifications

    def __init__(self, store: PostgresCore, queues: Sequence[str], wake: Callable[[], None] | None) -> None:
        self.store = store
        self.queues = frozenset(queues)
        self._wake = wake
        self._arrived = threading.Event()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"firesafe-listen-{store.schema}", daemon=True)
        self._thread.start()

    def _fire(self) -> None:
        self._arrived.set()
        if self._wake is not None:
            try:
                self._wake()
            except Exception:  # a broken callback must not end the listening
                log.exception("the wake-up callback of a listener failed")

    def _run(self) -> None:
        pause = 0.1
        while not self._stop.is_set():
            try:
                conn = self.store._connect_direct()
            except psycopg.Error as exc:
                log.warning("cannot listen for new jobs on %s (%s); polling meanwhile, retrying in %.1fs",
                            self.store.listen_where, _first_line(exc), pause)
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
                continue
            try:
                conn.execute(self.store.q["listen"])
                self._ready.set()
                self._fire()  # anything enqueued while we were not listening
                pause = 0.1
                while not self._stop.is_set():
                    for note in conn.notifies(timeout=self.POLL):
                        if note.payload in self.queues:
                            self._fire()
            except Exception as exc:  # psycopg.Error above all: the connection was lost
                if not self._stop.is_set():
                    log.warning("lost the LISTEN connection to %s (%s); reconnecting", self.store.listen_where,
                                _first_line(exc))
                    self._stop.wait(pause)
                    pause = min(pause * 2, 5.0)
            finally:
                self._ready.clear()
                conn.close()

    def ready(self, timeout: float) -> bool:
        """Wait until the listener is subscribed (True) or ``timeout`` passes."""
        return self._ready.wait(timeout)

    def wait(self, timeout: float) -> bool:
        """Wait for the next arrival (True) or ``timeout`` seconds (False); resets after returning True."""
        got = self._arrived.wait(timeout)
        self._arrived.clear()
        return got

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(self.POLL * 4)
