"""The example Django project (examples/django_project), through Django's test client: an order and
its job are written in one transaction, and the management command runs the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path
from types import ModuleType

import psycopg

from tests.conftest import PG_URL, drop_schema, need_postgres
from tests.orm.conftest import schema_url, visible_jobs

ROOT = Path(__file__).resolve().parents[2]


def post_order(item: str, quantity: int):
    from django.test import Client

    return Client().post("/orders/", json.dumps({"item": item, "quantity": quantity}),
                         content_type="application/json")


def test_a_post_creates_the_order_and_exactly_one_job(shop: ModuleType) -> None:
    from examples.django_project.shop.models import Order

    response = post_order("kettle", 2)
    assert response.status_code == 201, response.content
    order = Order.objects.get()
    assert response.json() == {"order": order.id, "job": f"ship-order:{order.id}"}
    assert visible_jobs(shop.app.store.schema) == 1
    job = shop.app.get(f"ship-order:{order.id}")
    assert (job.name, list(job.args), job.state) == ("ship_order", [order.id], "queued")


def test_a_failing_request_rolls_back_the_order_and_its_job(shop: ModuleType) -> None:
    from examples.django_project.shop.models import Order

    response = post_order("kettle", 11)  # more than the stock: found out after both writes
    assert response.status_code == 409
    assert response.json() == {"error": "only 10 kettle in stock"}
    assert not Order.objects.exists()
    assert visible_jobs(shop.app.store.schema) == 0


def test_the_management_command_runs_the_job(shop: ModuleType) -> None:
    from django.core.management import call_command

    from examples.django_project.shop.models import Order

    assert post_order("kettle", 1).status_code == 201
    out = StringIO()
    call_command("firesafe_worker", "--burst", stdout=out)
    assert out.getvalue().strip() == "succeeded: 1"
    order = Order.objects.get()
    assert order.status == "shipped"
    assert shop.app.get(f"ship-order:{order.id}").result == f"shipped order {order.id}"


def test_manage_py_migrates_and_runs_the_worker_from_the_command_line(tmp_path: Path) -> None:
    """The commands the guide gives, in a process of their own, on schemas of this test's own."""
    need_postgres()
    tag = uuid.uuid4().hex[:12]
    django_schema, store = f"fs_djcli_{tag}", f"fs_djclistore_{tag}"
    with psycopg.connect(PG_URL, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{django_schema}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIRESAFE_", "DJANGO_"))}
    env.update(PYTHONPATH=str(ROOT), DATABASE_URL=PG_URL, DJANGO_DB_SCHEMA=django_schema,
               FIRESAFE_STORE=schema_url(store))

    def manage(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "examples.django_project.manage", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    try:
        assert "Applying shop.0001_initial... OK" in manage("migrate")
        assert manage("firesafe_worker", "--burst").strip() == "succeeded: 0"
    finally:
        drop_schema(django_schema)
        drop_schema(store)
