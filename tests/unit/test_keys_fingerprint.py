"""Same arguments, same fingerprint: a call written positionally, by name, or from the CLI's --kwargs
is one job under one key, on both stores; rows stored by earlier versions (fingerprinted over the
arguments as the call wrote them) stay duplicates; other arguments still conflict."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from firesafe import App, IdempotencyConflict, InvalidInput
from firesafe.cli.main import cli
from firesafe.idempotency.keys import fingerprint, payload_json
from firesafe.store.base import InsertParams

APP_SOURCE = '''
from firesafe import App

app = App({url!r})
charged = []


@app.job
def charge(ctx, order_id, amount, currency="eur", *, note=None):
    charged.append((order_id, amount, currency, note))
    return [order_id, amount, currency, note]


@app.job
def plain(ctx, order_id, amount):
    return [order_id, amount]
'''


@pytest.fixture
def shop(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[App, str]]:
    """The shop app as a module the CLI can load (MODULE:APP), and its target."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE.format(url=store_url))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    yield module.app, f"{name}:app"
    module.app.close()


def cli_enqueue(target: str, job: str, key: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["enqueue", target, job, "--key", key, *extra])
    return result.exit_code, result.output


@pytest.mark.parametrize("job", ["charge", "plain"])
def test_by_position_by_name_and_cli_kwargs_are_one_job(shop, job: str) -> None:
    app, target = shop
    jd = app.jobs[job]
    first = jd.enqueue("o-1", 100, key="k1")
    assert first.created and (first.args, first.kwargs) == (["o-1", 100], {})
    for again in (jd.enqueue(order_id="o-1", amount=100, key="k1"), jd.enqueue("o-1", amount=100, key="k1"),
                  jd.enqueue_many([{"kwargs": {"amount": 100, "order_id": "o-1"}, "key": "k1"}])[0]):
        assert not again.created and again.id == first.id
    code, out = cli_enqueue(target, job, "k1", "--kwargs", json.dumps({"order_id": "o-1", "amount": 100}))
    assert code == 0 and "k1 already exists" in out, out
    code, out = cli_enqueue(target, job, "k1", "--args", '["o-1"]', "--kwargs", '{"amount": 100}')
    assert code == 0 and "k1 already exists" in out, out

    code, out = cli_enqueue(target, job, "k2", "--kwargs", json.dumps({"order_id": "o-2", "amount": 5}))
    assert code == 0 and "enqueued k2" in out, out
    assert not jd.enqueue("o-2", 5, key="k2").created
    assert app.get("k2").args == ["o-2", 5]  # stored as the signature places them: the worker runs it so
    app.work(burst=True)
    assert app.get("k2").result[:2] == ["o-2", 5]

    # Other arguments under a taken key still conflict, however they are written.
    with pytest.raises(IdempotencyConflict, match="different arguments"):
        jd.enqueue(order_id="o-1", amount=200, key="k1")
    with pytest.raises(IdempotencyConflict):
        jd.enqueue_many([{"args": ["o-9", 1], "key": "new"}, {"kwargs": {"order_id": "o-1", "amount": 7}, "key": "k1"}])
    assert app.store.job_get("new") is None  # all or nothing
    code, out = cli_enqueue(target, job, "k1", "--kwargs", json.dumps({"order_id": "o-1", "amount": 7}))
    assert code == 1 and "already taken" in out and "Traceback" not in out, out


def test_keyword_only_and_defaults_are_placed_and_defaults_are_not_filled_in(shop) -> None:
    app, _ = shop
    charge = app.jobs["charge"]
    usd = charge.enqueue("o-1", 100, note="gift", currency="usd", key="usd")
    assert (usd.args, usd.kwargs) == (["o-1", 100, "usd"], {"note": "gift"})
    assert not charge.enqueue(note="gift", currency="usd", amount=100, order_id="o-1", key="usd").created
    skipped = charge.enqueue("o-2", 1, note="n", key="skip")  # currency left out: note by name
    assert (skipped.args, skipped.kwargs) == (["o-2", 1], {"note": "n"})
    # A default is not filled in: passing it is another call than leaving it out (docs/keys.md).
    charge.enqueue("o-3", 1, key="default")
    with pytest.raises(IdempotencyConflict):
        charge.enqueue("o-3", 1, currency="eur", key="default")
    app.work(burst=True)
    assert app.get("usd").result == ["o-1", 100, "usd", "gift"]
    assert app.get("skip").result == ["o-2", 1, "eur", "n"]


def legacy_row(app: App, job: str, key: str, args: list, kwargs: dict) -> None:
    """A job stored as earlier versions stored it: payload and fingerprint of the arguments as the call
    wrote them (here by name), not as the signature places them."""
    payload, _ = payload_json(args, kwargs)
    [stored] = app.store.job_insert_many([InsertParams(
        key=key, name=job, queue="default", fingerprint=fingerprint(job, payload), payload=payload,
        arg_names=json.dumps(app.jobs[job].arg_names), max_attempts=5)])
    assert stored.created


@pytest.mark.parametrize("job", ["charge", "plain"])
def test_a_job_stored_by_an_earlier_version_stays_a_duplicate(shop, job: str) -> None:
    app, target = shop
    jd = app.jobs[job]
    legacy_row(app, job, "old", [], {"order_id": "o-1", "amount": 100})
    legacy = app.store.job_get("old")
    assert legacy is not None
    assert legacy.fingerprint != fingerprint(job, payload_json(["o-1", 100], {})[0])  # the new form differs
    for again in (jd.enqueue(order_id="o-1", amount=100, key="old"), jd.enqueue("o-1", 100, key="old"),
                  jd.enqueue_many([{"args": ["o-9", 9], "key": "fresh"},
                                   {"kwargs": {"order_id": "o-1", "amount": 100}, "key": "old"}])[1]):
        assert not again.created and again.id == legacy.id
    assert app.store.job_get("fresh") is not None
    code, out = cli_enqueue(target, job, "old", "--kwargs", json.dumps({"order_id": "o-1", "amount": 100}))
    assert code == 0 and "old already exists" in out, out
    with pytest.raises(IdempotencyConflict):
        jd.enqueue("o-1", 999, key="old")
    assert app.store.job_get("old").fingerprint == legacy.fingerprint  # the stored row is left as it was


def test_arguments_the_function_cannot_take_are_one_clear_error(shop) -> None:
    app, target = shop
    with pytest.raises(InvalidInput) as unknown:
        app.jobs["charge"].enqueue(oder_id="o-1", amount=1)
    assert str(unknown.value) == ("job 'charge' cannot take these arguments: no argument named 'oder_id'; "
                                  "it takes (order_id, amount, currency='eur', *, note=None)")
    with pytest.raises(InvalidInput, match="missing a required argument: 'amount'; it takes"):
        app.jobs["plain"].enqueue(order_id="o-1")
    with pytest.raises(InvalidInput, match="multiple values for argument 'order_id'"):
        app.jobs["plain"].enqueue("o-1", order_id="o-1")
    code, out = cli_enqueue(target, "plain", "x", "--kwargs", '{"order_id": "o-1", "amonut": 1}')
    assert code == 1 and "Traceback" not in out, out
    assert "job 'plain' cannot take these arguments: no argument named 'amonut'" in out
    assert len(out.strip().splitlines()) == 1
    assert app.store.job_get("x") is None


def test_a_legacy_duplicate_inside_the_callers_transaction_leaves_it_usable(shop, store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("enqueue(conn=...) joins a PostgreSQL transaction")
    import psycopg

    from tests.conftest import PG_URL

    app, _ = shop
    legacy_row(app, "plain", "old", [], {"order_id": "o-1", "amount": 100})
    with psycopg.connect(PG_URL) as conn:  # autocommit off: psycopg opens the transaction
        again = app.jobs["plain"].enqueue("o-1", 100, key="old", conn=conn)
        fresh = app.jobs["plain"].enqueue(order_id="o-2", amount=1, key="fresh", conn=conn)
        assert not again.created and fresh.created
        conn.commit()
    assert app.store.job_get("fresh") is not None and app.store.job_get("fresh").args == ["o-2", 1]
