"""Commands that only need the store: ``migrate``, ``show``, ``jobs``, ``stats``, ``cancel``.

None of them imports user code: a job is shown from what the store holds.
"""

from __future__ import annotations

import click

from firesafe.cli._common import (
    actor_options,
    console,
    echo_json,
    json_option,
    open_app,
    plain,
    safe_url,
    store_option,
    store_url_of,
)
from firesafe.cli._render import (
    jobs_table,
    masked_job_dict,
    render_job,
    signal_dict,
    signals_table,
    stats_data,
    stats_table,
)
from firesafe.deadletters.audit import actor_of, reason_of
from firesafe.states import State
from firesafe.store.base import JobFilter
from firesafe.stores import open_store

STATES = [str(s) for s in State]


@click.command(short_help="Create or upgrade the store's schema.")
@store_option
@click.option("--allow-other-tables", is_flag=True,
              help="SQLite: add firesafe's tables to a file that already holds other tables (another "
                   "application's). Without it such a file is refused and left as it is. Needed once: "
                   "the file is a firesafe store from then on.")
@json_option
def migrate(store_url: str | None, allow_other_tables: bool, as_json: bool) -> None:
    """Create the store or bring its schema up to date (safe to run again and again).

    A store that a newer firesafe migrated is refused (upgrade firesafe, or use the version that
    migrated it), and so is a SQLite file that holds another application's tables, unless
    --allow-other-tables says to share it.

    \b
    Examples:
      firesafe migrate --store sqlite:///jobs.db
      FIRESAFE_STORE=postgresql://postgres@127.0.0.1:5432/test firesafe migrate
    """
    url = store_url_of(store_url)
    store = open_store(url)
    schema = store.schema  # PostgreSQL: the schema, named even when the URL leaves it out
    try:
        before = store.schema_version()
        applied = store.migrate(allow_other_tables=allow_other_tables)
        version = store.schema_version()
    finally:
        store.close()
    if as_json:
        echo_json({"store": safe_url(url), **({"schema": schema} if schema else {}), "applied": applied,
                   "previous_version": before, "version": version})
        return
    where = safe_url(url) + (f" (schema {schema})" if schema and "schema=" not in url else "")
    if applied:
        click.echo(f"{where}: applied migration(s) {', '.join(map(str, applied))}; schema version {version}")
    else:
        click.echo(f"{where}: already up to date (schema version {version})")


@click.command(short_help="Show a job's timeline: attempts, errors, events.")
@click.argument("key")
@click.option("--traceback", "full_tracebacks", is_flag=True,
              help="Show each attempt's whole stored traceback (default: its last lines).")
@json_option
@store_option
def show(key: str, full_tracebacks: bool, as_json: bool, store_url: str | None) -> None:
    """Show one job and its timeline: state, reason, arguments (secrets masked), result, every
    attempt (worker, times, duration, outcome, error and traceback) and events (replayed by whom...).

    \b
    Examples:
      firesafe show refund:o-1
      firesafe show refund:o-1 --traceback
      firesafe show refund:o-1 --json | jq .trace
    """
    from firesafe.steps.children import family

    app = open_app(store_url)
    job = app.get(key)
    signals = [] if job.pruned else app.store.signal_list(job.id)
    kin = family(app.store, job)
    if as_json:
        shown = {**masked_job_dict(job), "signals": [signal_dict(s) for s in signals]}
        if kin is not None:  # a child, or a parent: its family (docs/workflows.md)
            shown.update(kin)
        echo_json(shown)
        return
    out = console()
    render_job(out, job, full_tracebacks=full_tracebacks, family=kin)
    if signals:
        out.print(signals_table(signals))


@click.command("jobs")
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--job", "name", metavar="NAME", help="Only jobs of this job name.")
@click.option("--queue", metavar="QUEUE", help="Only jobs in this queue.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@json_option
@store_option
def jobs_cmd(state: str | None, name: str | None, queue: str | None, limit: int, as_json: bool,
             store_url: str | None) -> None:
    """List jobs, newest first.

    \b
    Examples:
      firesafe jobs --state dead --job refund
      firesafe jobs --queue payments --limit 200 --json
    """
    app = open_app(store_url)
    found = app.jobs_list(state=state, job=name, queue=queue, limit=limit)
    if as_json:
        echo_json([masked_job_dict(j, with_trace=False) for j in found])
        return
    out = console()
    if not found:
        out.print("no jobs match", style="dim")
        return
    total = app.store.job_count(JobFilter(state=state, name=name, queue=queue))
    out.print(jobs_table(found))
    out.print(f"{len(found)} of {total} job(s)", style="dim")


@click.command()
@json_option
@store_option
def stats(as_json: bool, store_url: str | None) -> None:
    """Count jobs by queue and state.

    \b
    Examples:
      firesafe stats
      firesafe stats --json
    """
    app = open_app(store_url)
    data = stats_data(app.store.job_stats())
    if as_json:
        echo_json(data)
        return
    console().print(stats_table(data))


@click.command(short_help="Cancel a job (waiting: at once; running: asked to stop).")
@click.argument("key")
@actor_options
@json_option
@store_option
def cancel(key: str, actor: str | None, reason: str | None, as_json: bool, store_url: str | None) -> None:
    """Cancel a job: a waiting one at once; a running one is asked to stop (its ctx.cancelled turns
    true) and the cancel is recorded when its attempt ends. The job's event records who (--actor)
    and why (--reason). Its child jobs that have not ended are cancelled too (docs/workflows.md).

    With --json it prints {"key", "outcome", "state", "actor", "reason"}; outcome is cancelled,
    requested (running: asked to stop) or finished (it had already ended: nothing changed).

    \b
    Examples:
      firesafe cancel refund:o-1 --reason "customer asked"
      FIRESAFE_ACTOR=alice firesafe cancel refund:o-1 --json
    """
    app = open_app(store_url)
    who, why = actor_of(actor), reason_of(reason)
    outcome = app.cancel(key, actor=who, reason=why)
    job = app.get(key)
    if as_json:
        echo_json({"key": key, "outcome": outcome, "state": str(job.state), "actor": who, "reason": why})
        return
    if outcome == "cancelled":
        click.echo(f"cancelled {plain(key)}")
    elif outcome == "requested":
        click.echo(f"{plain(key)} is running: asked it to stop; the cancel is recorded when its attempt ends")
    else:
        hint = " (to take it out of the dead letters: firesafe dlq discard KEY)" if job.state == State.DEAD else ""
        click.echo(f"{plain(key)} had already finished (state {job.state}); nothing to cancel{hint}")
