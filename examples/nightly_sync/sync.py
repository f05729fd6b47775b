"""The nightly sync: each night at 02:00 (Berlin), copy the previous day's deals from the CRM's
export into the warehouse.

Each run covers one window (``window.start`` to ``window.end``) and is keyed by its start, so a
window runs once however often it is enqueued, and writing the same day again replaces its rows
(the warehouse's key is the day and the deal id): a re-run is safe.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from firesafe import App, Backoff, FakeClock

BERLIN = ZoneInfo("Europe/Berlin")


class BadExport(Exception):
    """The CRM's export for a day cannot be read: retrying will not fix it, the CRM must."""


class CRM:
    """The CRM's daily export: three deals a day. One day's export has a broken row until it is fixed."""

    def __init__(self, broken_day: str) -> None:
        self.broken_day = broken_day
        self.fixed = False

    def export(self, day: str) -> list[dict[str, Any]]:
        rows = [{"id": n, "amount": str(100 * n + int(day[-2:]))} for n in (1, 2, 3)]
        if day == self.broken_day and not self.fixed:
            rows[1]["amount"] = "N/A"
        return rows


class Warehouse:
    def __init__(self, path: str) -> None:
        self.path = path
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS deals (day TEXT, id INTEGER, amount INTEGER,"
                         " PRIMARY KEY (day, id))")
            conn.execute("CREATE TABLE IF NOT EXISTS loads (day TEXT, window TEXT)")

    def load(self, day: str, window: str, rows: list[tuple[int, int]]) -> None:
        with sqlite3.connect(self.path) as conn:  # one transaction: the day's rows and the load's record
            conn.executemany("INSERT OR REPLACE INTO deals (day, id, amount) VALUES (?, ?, ?)",
                             [(day, i, a) for i, a in rows])
            conn.execute("INSERT INTO loads (day, window) VALUES (?, ?)", (day, window))

    def days(self) -> dict[str, int]:
        with sqlite3.connect(self.path) as conn:
            return dict(conn.execute("SELECT day, count(*) FROM deals GROUP BY day ORDER BY day").fetchall())

    def loads(self) -> list[str]:
        with sqlite3.connect(self.path) as conn:
            return [d for (d,) in conn.execute("SELECT day FROM loads ORDER BY rowid")]


def build(store_url: str, clock: FakeClock, crm: CRM, warehouse: Warehouse) -> App:
    """The app. ``clock`` stands in for time: the story moves it across a weekend."""
    app = App(store_url, clock=clock)

    @app.schedule("0 2 * * *", tz="Europe/Berlin", catchup="all", catchup_window=timedelta(days=3),
                  max_attempts=3, backoff=Backoff(base=60), give_up_on=(BadExport,))
    def nightly_sync(ctx, window) -> dict[str, Any]:
        day = window.start.astimezone(BERLIN).date().isoformat()
        rows = []
        for row in crm.export(day):
            try:
                rows.append((row["id"], int(row["amount"])))
            except ValueError:
                raise BadExport(f"the CRM export of {day} has deal {row['id']} with amount {row['amount']!r}") from None
        warehouse.load(day, window.key, rows)
        return {"day": day, "deals": len(rows)}

    return app
