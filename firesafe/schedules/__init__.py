"""Schedules and backfill: every window of a cron schedule runs once, missed windows are caught up,
ranges are backfilled on purpose. See ``docs/schedules.md``.

Declare with ``@app.schedule(...)``; the scheduler runs inside workers. This package's ``__init__``
imports nothing that imports the app (the stores import the part's mixins).
"""

from firesafe.schedules.backfill import BackfillResult
from firesafe.schedules.status import ScheduleStatus
from firesafe.schedules.windows import Cron, Window

__all__ = ["BackfillResult", "Cron", "ScheduleStatus", "Window"]
