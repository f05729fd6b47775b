"""Enqueue in Django's transaction.atomic(): the job exists iff the block commits.

Django is configured in this process with the example project's settings (see conftest.py); these
tests use its ``ship_order`` job and its ``Order`` model directly.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from firesafe import InvalidInput, State
from firesafe.integrations.django import conn_of
from tests.orm.conftest import visible_jobs


def test_a_job_enqueued_in_atomic_exists_once_the_block_commits_and_not_before(shop: ModuleType) -> None:
    from django.db import transaction

    from examples.django_project.shop.models import Order

    schema = shop.app.store.schema
    with transaction.atomic():
        order = Order.objects.create(item="kettle", quantity=1)
        job = shop.ship_order.enqueue(order.id, key=f"ship-order:{order.id}", conn=conn_of())
        assert job.created and job.state == State.QUEUED
        assert visible_jobs(schema) == 0  # a worker's connection sees nothing before the commit
        assert shop.app.work(["shipping"], burst=True).succeeded == 0
    assert visible_jobs(schema) == 1
    assert shop.app.work(["shipping"], burst=True).succeeded == 1
    assert Order.objects.get(id=order.id).status == "shipped"


def test_an_exception_inside_atomic_leaves_neither_the_order_nor_the_job(shop: ModuleType) -> None:
    from django.db import transaction

    from examples.django_project.shop.models import Order

    with pytest.raises(RuntimeError), transaction.atomic():
        order = Order.objects.create(item="kettle", quantity=1)
        shop.ship_order.enqueue(order.id, key=f"ship-order:{order.id}", conn=conn_of())
        raise RuntimeError("payment declined")
    assert visible_jobs(shop.app.store.schema) == 0
    assert not Order.objects.exists()


def test_an_inner_atomic_is_a_savepoint_that_takes_its_job_with_it(shop: ModuleType) -> None:
    from django.db import transaction

    with transaction.atomic():
        shop.ship_order.enqueue(1, key="ship-order:kept", conn=conn_of())
        with pytest.raises(RuntimeError), transaction.atomic():
            shop.ship_order.enqueue(2, key="ship-order:undone", conn=conn_of())
            raise RuntimeError("undo the inner block")
    assert [j.key for j in shop.app.jobs_list()] == ["ship-order:kept"]


def test_outside_atomic_there_is_no_transaction_to_join(shop: ModuleType) -> None:
    with pytest.raises(InvalidInput, match=r"inside `with transaction.atomic\(\):`"):
        conn_of()
    assert visible_jobs(shop.app.store.schema) == 0


def test_a_block_marked_for_rollback_refuses_the_enqueue_as_django_refuses_queries(shop: ModuleType) -> None:
    from django.db import DatabaseError, transaction

    with transaction.atomic():
        transaction.set_rollback(True)
        with pytest.raises(DatabaseError):  # TransactionManagementError: Django's own refusal
            conn_of()
    assert visible_jobs(shop.app.store.schema) == 0
