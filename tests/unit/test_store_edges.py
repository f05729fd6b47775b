"""Bad store input: clear errors, nothing written."""

from __future__ import annotations

import pytest

from firesafe import App, StoreError
from firesafe.store import resolve_url
from firesafe.stores import open_store


def test_unknown_store_url_is_a_clear_error() -> None:
    with pytest.raises(StoreError, match="unknown store URL"):
        open_store("mysql://localhost/x")


def test_default_url_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("FIRESAFE_STORE", "sqlite:///from-env.db")
    assert resolve_url(None) == "sqlite:///from-env.db"
    monkeypatch.delenv("FIRESAFE_STORE")
    assert resolve_url(None) == "sqlite:///firesafe.db"


def test_corrupt_database_file_is_a_clear_error(tmp_path) -> None:
    path = tmp_path / "broken.db"
    path.write_bytes(b"this is not a database, just some text" * 100)
    app = App(f"sqlite:///{path}")
    with pytest.raises(StoreError, match="not a usable firesafe SQLite store"):
        app.store  # noqa: B018
    assert path.read_bytes().startswith(b"this is not a database")


def test_missing_folder_is_a_clear_error(tmp_path) -> None:
    app = App(f"sqlite:///{tmp_path}/no/such/dir/x.db")
    with pytest.raises(StoreError, match="cannot open"):
        app.store  # noqa: B018


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(StoreError, match="in-memory"):
        open_store("sqlite:///:memory:")


def test_migrate_is_idempotent(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/m.db")
    applied = store.migrate()
    assert applied[0] == 1 and applied == sorted(applied)
    assert store.migrate() == []
    assert store.schema_version() == applied[-1]


def test_both_claims_return_exactly_the_columns_a_claimed_job_is_built_from() -> None:
    """A claim returns what an attempt needs (models.CLAIMED_COLUMNS), in both dialects: a column
    missing fails every claim, one more is work for the server and the client on every job."""
    import re

    from firesafe.models import CLAIMED_COLUMNS
    from firesafe.store import queries

    for dialect in ("sqlite", "postgres"):
        after = queries.load(dialect)["job_claim"].rsplit("RETURNING", 1)[1]
        listed = re.split(r"[);]", after, maxsplit=1)[0]
        assert tuple(c.strip().removeprefix("j.") for c in listed.split(",")) == CLAIMED_COLUMNS, dialect


def test_a_claimed_job_is_built_alike_from_a_mapping_and_from_values_and_its_payload_read_strictly() -> None:
    import json

    from firesafe.models import CLAIMED_COLUMNS, Job

    row = {"id": 7, "key": "k", "name": "work", "queue": "default", "state": "running",
           "payload": '{"args":[1,"two",null],"kwargs":{"x":1.5}}', "arg_names": '["a","b","c"]', "attempt": 2,
           "max_attempts": 3, "runs": 2, "deferrals": 0, "lost": 1, "run_at": 1.7e9, "created_at": 1.6e9,
           "updated_at": 1.7e9, "cancel_requested": 0, "trace_context": None, "priority": 3,
           "parent_id": None}
    a = Job.from_claim_row(row, "w1")
    b = Job.from_claim_values(tuple(row[c] for c in CLAIMED_COLUMNS), "w1")
    assert a == b
    assert a.priority == 3
    assert (a.args, a.kwargs, a.arg_names, a.worker, a.cancel_requested) == ([1, "two", None], {"x": 1.5},
                                                                              ["a", "b", "c"], "w1", False)
    # A payload firesafe did not write (spaces around it) still reads; one with text after its JSON is
    # unreadable: the job says why (a worker ends it dead without running it), the claim goes on.
    spaced = Job.from_claim_row({**row, "payload": ' {"args": [1]} '}, "w1")
    assert spaced.args == [1] and spaced.unreadable is None
    trailing = Job.from_claim_row({**row, "payload": '{"args":[1]} trailing'}, "w1")
    assert trailing.args == [] and (trailing.unreadable or "").startswith(f"arguments: {json.JSONDecodeError.__name__}")
