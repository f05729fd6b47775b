"""Fuzzed enqueues, on both stores: every input either works (and reads back as given) or gets a clear
FiresafeError; no other exception, and no partial write. Payloads that are not JSON are refused.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firesafe import App, FiresafeError, InvalidInput
from firesafe.store.base import JobFilter

FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: What pickle.dumps({"a": 1}) makes (written out: nothing here imports pickle), and an object that
#: pickle would happily serialise and run code from.
PICKLE_BYTES = b"\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s."


class Sneaky:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("this must never run",))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _nested(depth: int) -> list[Any]:
    top: list[Any] = []
    inner = top
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


NOT_JSON = st.one_of(
    st.just(10 ** 5000),  # past Python's digits for text
    st.just(PICKLE_BYTES), st.binary(min_size=1, max_size=8), st.just(Sneaky()), st.sets(st.integers(), min_size=1),
    st.just(float("nan")), st.just(float("inf")), st.just(-math.inf), st.complex_numbers(),
    st.just(datetime(2024, 5, 1, tzinfo=UTC)), st.just(Decimal("1.5")), st.just(object()),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),
)
#: Values that may hide something that is not JSON anywhere inside
ANY = st.one_of(JSON, NOT_JSON, st.lists(st.one_of(JSON, NOT_JSON), min_size=1, max_size=3),
                st.dictionaries(st.text(max_size=5), st.one_of(JSON, NOT_JSON), min_size=1, max_size=3))
KEYS = st.one_of(st.none(), st.text(max_size=300), st.text(alphabet=st.characters(codec="ascii"), max_size=20),
                 st.integers(), st.binary(max_size=4))
NAMES = st.one_of(st.none(), st.text(max_size=140), st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,20}", fullmatch=True))
DELAYS = st.one_of(st.none(), st.floats(), st.integers(min_value=-10, max_value=10**6), st.text(max_size=3),
                   st.booleans(), st.integers(min_value=10**9, max_value=10**20))
RUN_AT = st.one_of(st.none(), st.datetimes(timezones=st.just(UTC)), st.datetimes(), st.floats(), st.text(max_size=5))


@pytest.fixture
def fuzz_app(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.job
    def take(ctx: Any, a: Any = None, b: Any = None, **more: Any) -> None:
        return None

    @app.job
    def two(ctx: Any, x: Any, y: Any) -> None:
        return None

    app.store.migrate()
    yield app
    app.close()


def total(app: App) -> int:
    return app.store.job_count(JobFilter())


def roundtrip(value: Any) -> Any:
    """What JSON gives back for ``value`` (tuples become lists)."""
    if isinstance(value, (list, tuple)):
        return [roundtrip(v) for v in value]
    if isinstance(value, dict):
        return {k: roundtrip(v) for k, v in value.items()}
    return value


@FUZZ
@given(args=st.lists(ANY, max_size=3),
       kwargs=st.dictionaries(st.sampled_from(["a", "b", "c", "key2"]), ANY, max_size=2),
       key=KEYS, queue=NAMES, delay=DELAYS, run_at=RUN_AT)
def test_enqueue_works_or_says_why_and_writes_nothing_then(fuzz_app: App, args: list[Any], kwargs: dict[str, Any],
                                                          key: Any, queue: Any, delay: Any, run_at: Any) -> None:
    before = total(fuzz_app)
    try:
        job = fuzz_app.jobs["take"].enqueue(*args, key=key, queue=queue, delay=delay, run_at=run_at, **kwargs)
    except FiresafeError as exc:
        assert str(exc).strip()  # a message meant for people
        assert total(fuzz_app) == before  # nothing written
        return
    # It worked: the stored job reads back as given, placed as the signature places them (docs/keys.md)
    stored = fuzz_app.get(job.key)
    bound = inspect.signature(fuzz_app.jobs["take"].fn).bind(None, *args, **kwargs)
    assert stored.args == roundtrip(list(bound.args[1:])) and stored.kwargs == roundtrip(bound.kwargs)
    assert total(fuzz_app) == before + (1 if job.created else 0)
    if isinstance(key, str):
        assert stored.key == key


@FUZZ
@given(items=st.lists(st.fixed_dictionaries({"args": st.lists(ANY, max_size=2)},
                                            optional={"key": KEYS, "delay": DELAYS, "queue": NAMES,
                                                      "run_at": RUN_AT}),
                      min_size=1, max_size=6))
def test_enqueue_many_is_all_or_nothing(fuzz_app: App, items: list[dict[str, Any]]) -> None:
    before = total(fuzz_app)
    try:
        jobs = fuzz_app.jobs["take"].enqueue_many(items)
    except FiresafeError:
        assert total(fuzz_app) == before  # one bad item: none of the batch is stored
        return
    assert total(fuzz_app) == before + len({j.key for j in jobs if j.created})  # a repeated key is one job


@FUZZ
@given(value=NOT_JSON)
def test_payloads_that_are_not_json_are_refused(fuzz_app: App, value: Any) -> None:
    before = total(fuzz_app)
    for call in (lambda: fuzz_app.jobs["take"].enqueue(value),
                 lambda: fuzz_app.jobs["take"].enqueue(a=[1, {"deep": value}]),
                 lambda: fuzz_app.jobs["take"].enqueue_many([{"args": [1]}, {"args": [value]}])):
        with pytest.raises(InvalidInput, match=r"JSON|cannot carry|non-string key"):
            call()
    assert total(fuzz_app) == before


@pytest.mark.parametrize(("value", "says"), [
    (10 ** 5000, "hold an integer of more than 4300 digits, which cannot be written as JSON"),
    (_nested(5000), "are nested more than 256 levels deep")], ids=["huge-int", "deep-nesting"])
def test_a_number_or_a_nesting_python_cannot_write_as_text_is_refused_clearly(fuzz_app: App, value: Any,
                                                                               says: str) -> None:
    before = total(fuzz_app)
    for call in (lambda: fuzz_app.jobs["take"].enqueue(value),
                 lambda: fuzz_app.jobs["take"].enqueue_many([{"args": [1]}, {"args": [value]}])):
        with pytest.raises(InvalidInput, match=f"^arguments {says}$"):
            call()
    assert total(fuzz_app) == before


@FUZZ
@given(text=st.sampled_from([
    "!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system", "--- !ruby/object:Gem::Installer",
    "\x80\x04\x95", "!!binary |\n  gASVCgAAAAAAAAB9lIwBYZRLAXMu",
]), nest=st.booleans())
def test_yaml_tags_and_pickle_text_stay_inert_strings(fuzz_app: App, text: str, nest: bool) -> None:
    # A string that looks like a YAML tag or a pickle opcode is just text in JSON: stored as given,
    # handed back as the same string, never interpreted
    arg = {"x": [text]} if nest else text
    job = fuzz_app.jobs["take"].enqueue(arg)
    assert fuzz_app.get(job.key).args == [arg]


@FUZZ
@given(text=st.text(min_size=1, max_size=5).map(lambda s: s + "\ud800"))
def test_text_that_is_not_unicode_is_refused_clearly(fuzz_app: App, text: str) -> None:
    before = total(fuzz_app)
    with pytest.raises(InvalidInput):
        fuzz_app.jobs["take"].enqueue(text)
    with pytest.raises(InvalidInput):
        fuzz_app.jobs["take"].enqueue(a={text: 1})
    assert total(fuzz_app) == before


@FUZZ
@given(args=st.lists(JSON, max_size=4), kwargs=st.dictionaries(st.text(max_size=6), JSON, max_size=3))
def test_wrong_arity_is_refused_before_anything_is_stored(fuzz_app: App, args: list[Any],
                                                         kwargs: dict[str, Any]) -> None:
    assume(not (len(args) == 2 and not kwargs))
    assume(not (set(kwargs) == {"x", "y"} and not args))
    assume(not (len(args) == 1 and set(kwargs) == {"y"}))
    before = total(fuzz_app)
    try:
        fuzz_app.jobs["two"].enqueue(*args, **kwargs)
    except FiresafeError:
        assert total(fuzz_app) == before
    except TypeError as exc:  # a reserved keyword (key, delay, ...) with a wrong type: still must be clear
        raise AssertionError(f"a TypeError escaped: {exc}") from None
