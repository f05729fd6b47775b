"""What a type checker says of calls to declared jobs (checked by ``test_typing.py`` with mypy
``--warn-unused-ignores``, never run): each correct call passes as written, and each wrong call is
silenced by an ignore of the one error code it must raise, so an ignore that silences nothing (the
wrong call was let through) fails the check.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg

from firesafe import App, Job
from firesafe.jobs import Enqueuer, JobDef

app = App("sqlite:///typing-cases.db")


@app.job
def refund(ctx: Any, refund_id: str, amount_cents: int, *, note: str = "") -> str:
    return refund_id


@app.job(queue="mail", max_attempts=3)
async def notify(ctx: Any, user_id: int) -> None:
    pass


# The decorator keeps the function's parameters and result.
plain: JobDef[[str, int], str] = refund
direct: str = refund(None, "r-1", 500)
bound: Enqueuer[[str, int]] = refund.options(key="refund:r-1")


def correct() -> list[Job]:
    return [
        refund.enqueue("r-1", 500),
        refund.enqueue("r-1", amount_cents=500, note="late"),
        refund.enqueue(refund_id="r-1", amount_cents=500),
        refund.enqueue("r-1", 500, key="refund:r-1"),  # options as keywords: accepted, as before
        refund.enqueue("r-1", 500, delay=30),
        refund.enqueue("r-1", 500, run_at=datetime(2030, 1, 1, tzinfo=UTC), queue="refunds"),
        refund.options(key="refund:r-1", delay=30.0).enqueue("r-1", 500, note="late"),
        notify.enqueue(7),
        notify.options(key="welcome:7").enqueue(user_id=7),
    ]


async def correct_async(aconn: psycopg.AsyncConnection[Any]) -> list[Job]:
    return [
        await refund.enqueue_async("r-1", 500),
        await refund.enqueue_async("r-1", 500, key="refund:r-1"),
        await refund.enqueue_async("r-1", 500, conn=aconn),  # in aconn's transaction
        await refund.options(key="refund:r-1").enqueue_async("r-1", amount_cents=500),
        await refund.options(key="refund:r-1", conn=aconn).enqueue_async("r-1", 500),
        *await refund.enqueue_many_async([{"args": ["r-2", 1], "key": "refund:r-2"}], conn=aconn),
        await notify.enqueue_async(7),
        await app.get_async("refund:r-1"),
        *await refund.enqueue_many_async([{"args": ["r-2", 1], "key": "refund:r-2"}]),
    ]


def wrong() -> None:
    refund.options(key="k").enqueue("r-1", "500")  # type: ignore[arg-type]
    refund.options(key="k").enqueue("r-1")  # type: ignore[call-arg]
    refund.options(key="k").enqueue("r-1", 500, colour="red")  # type: ignore[call-arg]
    refund.options(key=1).enqueue("r-1", 500)  # type: ignore[arg-type]
    refund.options(keys="k")  # type: ignore[call-arg]
    refund.enqueue("r-1", "500")  # type: ignore[call-overload]
    refund.enqueue(500, "r-1")  # type: ignore[call-overload]
    refund.enqueue("r-1")  # type: ignore[call-overload]
    refund.enqueue("r-1", 500, key=1)  # type: ignore[call-overload]
    refund(None, "r-1", "500")  # type: ignore[arg-type]
    notify.enqueue("7")  # type: ignore[call-overload]
    wrong_result: int = refund(None, "r-1", 500)  # type: ignore[assignment]
    print(wrong_result)


async def wrong_async() -> None:
    await refund.enqueue_async("r-1", "500")  # type: ignore[call-overload]
    await refund.options(key="k").enqueue_async("r-1", "500")  # type: ignore[arg-type]
    await refund.options(conn=None).enqueue_async("r-1", "500")  # type: ignore[arg-type]
    await app.get_async(7)  # type: ignore[arg-type]
