"""The store contract suite (tests/contract) once more, on PostgreSQL through PgBouncer in
transaction mode: ``?pooler=transaction`` with a ``direct=`` URL for LISTEN and migrations.

Each contract test is taken from its module under the name ``test_<module>__<test>`` and runs here
with this module's ``store_url``, so it meets the pooler's shared server connections.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import drop_schema
from tests.postgres.pgbouncer import Bouncer, direct_param

pytestmark = pytest.mark.postgres

MODULES = ("alerts", "contract_surface", "enqueue", "finish_and_claim", "hostile_data", "inbox", "limits",
           "retries_and_dead_letters", "schedules", "steps", "workers_and_leases")

for _short in MODULES:
    _module = importlib.import_module(f"tests.contract.test_{_short}")
    for _name, _obj in vars(_module).items():
        if _name.startswith("test_") and callable(_obj):
            globals()[f"test_{_short}__{_name[5:]}"] = _obj
    if _short == "contract_surface":
        store = _module.store  # that module's fixture, for its tests


@pytest.fixture
def store_url(bouncer: Bouncer) -> Iterator[str]:
    """The contract suite's store, here behind the pooler (replaces the sqlite/postgres parameters)."""
    schema = f"fs_test_{uuid.uuid4().hex[:12]}"
    try:
        yield bouncer.url(f"schema={schema}&pooler=transaction&{direct_param()}")
    finally:
        drop_schema(schema)
