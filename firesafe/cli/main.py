"""The ``firesafe`` command: run workers, enqueue, and review jobs and dead letters.

``main()`` is the console-script entry point; ``cli`` is the click group (tests drive it with
click's ``CliRunner``). User mistakes print one red line and exit with 1 (2 for bad usage); no
command prints a Python traceback.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from firesafe.cli._alerts import alerts
from firesafe.cli._audit import audit
from firesafe.cli._common import CLIError, plain
from firesafe.cli._dashboard import dashboard
from firesafe.cli._dlq import dlq
from firesafe.cli._drill import drill
from firesafe.cli._inbox import consume, events, serve
from firesafe.cli._limits import limiters
from firesafe.cli._rerun import rerun
from firesafe.cli._review import cancel, jobs_cmd, migrate, show, stats
from firesafe.cli._run import enqueue, worker
from firesafe.cli._schedules import backfill, schedules
from firesafe.cli._signal import signal
from firesafe.errors import FiresafeError
from firesafe.masking import check as check_masking
from firesafe.masking import mask_text
from firesafe.sanitize import safe_str
from firesafe.version import __version__


class _Group(click.Group):
    """Turns firesafe's own errors into a one-line message and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            check_masking()  # a bad $FIRESAFE_MASK_* stops every command before it prints anything
            return super().invoke(ctx)
        except FiresafeError as exc:
            raise CLIError(mask_text(safe_str(exc))) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="firesafe", message="%(prog)s %(version)s")
def cli() -> None:
    """firesafe: the recovery layer for background jobs.

    Idempotent job keys, bounded retries with backoff, dead letters with the full trace of every
    attempt, and safe replays, on SQLite or PostgreSQL.

    Commands that need your code (worker, enqueue, schedules, backfill, dashboard, serve, consume,
    events replay, alerts test, drill) take the app as MODULE:APP. The others need only the store:
    --store URL, or --app MODULE:APP for the store that app names, else $FIRESAFE_STORE, else
    $FIRESAFE_APP, else sqlite:///firesafe.db. Commands that change jobs or settings record who
    (--actor, else $FIRESAFE_ACTOR, else user@host) and why (--reason).

    \b
    Examples:
      firesafe migrate
      firesafe worker myapp:app --queues payments,default --concurrency 8
      firesafe enqueue myapp:app refund --args '["o-1", 100]' --key refund:o-1
      firesafe show refund:o-1
      firesafe jobs --state dead
      firesafe dlq replay --job refund --dry-run
      firesafe signal refund:o-9 approval --data '{"approved": true}'
    """


for command in (worker, enqueue, migrate, show, jobs_cmd, stats, cancel, dlq, dashboard, alerts, schedules,
                backfill, rerun, signal, serve, consume, events, limiters, drill, audit):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. A bug (not a user mistake) prints one line, unless FIRESAFE_DEBUG=1."""
    try:
        cli.main(args=argv, prog_name="firesafe")
    except Exception as exc:
        if os.environ.get("FIRESAFE_DEBUG") == "1":
            raise
        message = f"internal error: {type(exc).__name__}: {mask_text(safe_str(exc))}"
        click.echo(click.style(f"{plain(message)} (FIRESAFE_DEBUG=1 shows the traceback)", fg="red"), err=True)
        sys.exit(1)
