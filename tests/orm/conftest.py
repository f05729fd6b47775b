"""Fixtures of the ORM integrations: each test's firesafe store in a schema of its own, and Django
configured once per process with its tables in a schema of that process's own (dropped at the end).
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Iterator
from types import ModuleType

import psycopg
import pytest

from firesafe import App
from tests.conftest import PG_URL, drop_schema, need_postgres


def schema_url(schema: str) -> str:
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"


@pytest.fixture
def store_schema() -> Iterator[str]:
    need_postgres()
    schema = f"fs_orm_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
def app(store_schema: str) -> Iterator[App]:
    a = App(schema_url(store_schema))
    a.store.migrate()
    yield a
    a.close()


def visible_jobs(schema: str) -> int:
    """Jobs that a connection of its own (as a worker's) sees committed in the store's schema."""
    with psycopg.connect(PG_URL, autocommit=True) as c:
        row = c.execute(f'SELECT count(*) FROM "{schema}".firesafe_jobs').fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="session")
def django_shop() -> Iterator[ModuleType]:
    """The example project (examples/django_project) configured in this process: its settings, with
    Django's and firesafe's tables each in a schema of this process's own, migrated. Yields the
    shop's tasks module (its firesafe ``app``)."""
    need_postgres()
    tag = uuid.uuid4().hex[:12]
    django_schema, store = f"fs_dj_{tag}", f"fs_djstore_{tag}"
    with psycopg.connect(PG_URL, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{django_schema}"')
    env = {"DATABASE_URL": PG_URL, "DJANGO_DB_SCHEMA": django_schema, "FIRESAFE_STORE": schema_url(store)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:  # read the example's settings under this run's names; the environment is left as it was
        settings_module = importlib.import_module("examples.django_project.settings")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections
    from django.test.utils import setup_test_environment

    settings.configure(**{k: getattr(settings_module, k) for k in dir(settings_module) if k.isupper()})
    django.setup()
    setup_test_environment()
    call_command("migrate", verbosity=0)
    tasks = importlib.import_module("examples.django_project.shop.tasks")
    try:
        yield tasks
    finally:
        tasks.app.close()
        connections.close_all()
        drop_schema(django_schema)
        drop_schema(store)


@pytest.fixture
def shop(django_shop: ModuleType) -> Iterator[ModuleType]:
    """The shop with no orders and no jobs left by an earlier test."""
    from examples.django_project.shop.models import Order

    Order.objects.all().delete()
    django_shop.app.store.migrate()
    with psycopg.connect(PG_URL, autocommit=True) as c:
        c.execute(f'TRUNCATE "{django_shop.app.store.schema}".firesafe_jobs CASCADE')
    yield django_shop
