"""Contract: the store surface is declared in one place (firesafe/store/contract.py), and each store
offers exactly that: every declared method with the declared signature, no public method left
undeclared, and capabilities as attributes. Runs on every store."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

from firesafe import FakeClock
from firesafe.store.contract import PARTS, ListenStore, Store
from firesafe.stores import open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url, FakeClock())
    s.migrate()
    try:
        yield s
    finally:
        s.close()


def _members(protocol: type) -> dict[str, object]:
    """What a Protocol declares: its methods and properties (without those of ``object`` and ``Protocol``)."""
    out: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object,) or klass.__module__ == "typing":
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
                out[name] = value
    return out


def _declared(store: Store) -> dict[str, object]:
    return _members(ListenStore if store.supports_listen else Store)


def _shape(fn: object) -> list[tuple[str, object, object]]:
    """A signature without annotations: each parameter's name, kind and default."""
    assert callable(fn)
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_store_is_every_part_of_the_contract(store: Store) -> None:
    """Given a store opened from its URL, then it is each part of the contract (checked at run time)."""
    missing = [name for name, part in PARTS.items() if not isinstance(store, part)]
    assert missing == []
    assert isinstance(store, Store)


def test_every_declared_method_is_implemented_with_the_declared_signature(store: Store) -> None:
    """Given the contract, then the store has each method it declares, taking the same parameters
    (names, kinds, defaults): a caller typed ``Store`` can call the store as the contract says."""
    klass = type(store)
    differ = {}
    for name, declared in _declared(store).items():
        if isinstance(declared, property):
            assert hasattr(store, name), f"{klass.__name__} lacks the attribute {name}"
            continue
        assert callable(declared)
        implemented = getattr(klass, name, None)
        assert implemented is not None, f"{klass.__name__} lacks {name}, which the contract declares"
        if _shape(implemented) != _shape(declared):
            differ[name] = (str(inspect.signature(implemented)), str(inspect.signature(declared)))
    assert differ == {}


def test_no_public_method_of_the_store_is_left_undeclared(store: Store) -> None:
    """Given the store's class, then each of its public methods is declared in the contract: a part
    that adds one declares it there, or callers could not see it through ``Store``."""
    declared = _declared(store)
    klass = type(store)
    public = {name for name in dir(klass) if not name.startswith("_") and not name.isupper()
              and callable(getattr(klass, name))}
    assert sorted(public - set(declared)) == []


def test_capabilities_are_attributes_not_probes(store: Store) -> None:
    """Given a store, then what it can do is said by attributes of the contract: its dialect, whether
    writers run at once, whether it wakes idle workers (then it is a ListenStore), where it is."""
    assert store.dialect in ("sqlite", "postgres")
    assert isinstance(store.concurrent_writers, bool) and isinstance(store.supports_listen, bool)
    assert store.supports_listen == isinstance(store, ListenStore)
    if store.dialect == "sqlite":
        assert (store.concurrent_writers, store.supports_listen, store.schema) == (False, False, None)
        assert store.path is not None and store.where == store.url
    else:
        assert (store.concurrent_writers, store.supports_listen, store.path) == (True, True, None)
        assert store.schema is not None and f"(schema {store.schema})" in store.where
    assert store.now() == store.clock.now() if store.clock is not None else store.now() > 0
