"""Fixtures of the contract tests (the store-wide ones are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from firesafe import App


@pytest.fixture
def versions(store_url: str, clock) -> Iterator[Callable[[], App]]:
    """Apps on one store, one per version of the code, as a deploy makes them; closed at the end."""
    made: list[App] = []

    def make() -> App:
        made.append(App(store_url, clock=clock))
        return made[-1]

    yield make
    for a in made:
        a.close()
