"""``firesafe drill``: test your jobs' recovery story before the fire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from firesafe.cli._common import Duration, console, data, echo_json, fail, is_interactive, plain
from firesafe.cli._loader import load_app
from firesafe.drill.worker import FAULTS
from firesafe.errors import FiresafeError


def _faults(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(f.strip() for f in value.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown:
        raise click.BadParameter(f"unknown fault(s) {', '.join(unknown)}: use {', '.join(FAULTS)}")
    return chosen


def _jobs(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(j.strip() for j in value.split(",") if j.strip()))
    if not chosen:
        raise click.BadParameter("name at least one job, like --jobs refund,sync")
    return chosen


@click.command(short_help="Run your jobs against a scratch store while faults strike.")
@click.argument("target", metavar="MODULE:APP")
@click.option("--jobs", "jobs", required=True, callback=_jobs, metavar="JOB1,JOB2",
              help="The jobs to drill (comma-separated names).")
@click.option("--args", "args_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help='Sample arguments by job, as JSON: {"refund": [["o-1", 100], '
              '{"kwargs": {"order": "o-2"}}]}. Jobs without arguments need none.')
@click.option("--faults", default=",".join(FAULTS), show_default=True, callback=_faults, metavar="F1,F2",
              help="Faults to inject: exception (raised in the job), timeout (an attempt outlives its "
                   "timeout), kill (the worker process is SIGKILLed mid-attempt), store (store calls fail).")
@click.option("--seconds", type=Duration(), default="30s", show_default=True,
              help="How long faults strike (samples are enqueued again and again meanwhile).")
@click.option("--settle", type=Duration(), default="60s", show_default=True,
              help="After the faults: how long every job gets to end before it counts as never ended.")
@click.option("--rate", type=click.FloatRange(0.0, 1.0), default=0.2, show_default=True,
              help="Chance that a fault strikes at each point of an attempt (at most one per attempt).")
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True, help="Worker processes.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Attempts at once in each worker process.")
@click.option("--seed", type=int, default=None, help="Seed of the fault draws (printed with the report).")
@click.option("--keep", is_flag=True, help="Keep the scratch folder (store, worker logs, events) afterwards.")
@click.option("--yes", "-y", is_flag=True,
              help="Run without asking: the jobs' code, and so their side effects, runs for real. Needed when "
                   "stdin is not a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def drill(target: str, jobs: tuple[str, ...], args_file: Path | None, faults: tuple[str, ...], seconds: float,
          settle: float, rate: float, workers: int, concurrency: int, seed: int | None, keep: bool, yes: bool,
          as_json: bool) -> None:
    """Run jobs of MODULE:APP against a scratch SQLite store while faults strike, then report per job:
    attempts, resumes, steps restored and re-run, dead letters and alerts, and every promise broken
    (a step that ran twice without an idempotency key, a job that never ended, ...).

    Your store is never opened: the jobs run on a new SQLite file in a temporary folder, and alerts
    are kept there, not sent. But the jobs' own code runs for real, again and again: whatever it
    does outside firesafe (charges, e-mails, HTTP calls) happens at every attempt, each round under
    new job keys. Point the jobs at sandboxes first. The drill says so and asks before it starts;
    without a terminal it runs only with --yes. A step declared safe to repeat
    (firesafe.steps.repeatable) is not flagged when it runs again. Exit code 1 when an invariant broke.

    \b
    Examples:
      firesafe drill myapp:app --jobs refund,sync --args samples.json --seconds 30
      firesafe drill myapp:app --jobs refund --args samples.json --faults kill,store --json --yes
    """
    from firesafe.drill.runner import DrillOptions, check_samples, parse_samples, run_drill

    if seconds <= 0:
        raise click.BadParameter("must be more than 0 seconds", param_hint="--seconds")
    app = load_app(target)
    missing = [j for j in jobs if j not in app.jobs]
    if missing:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise fail(f"no job named {', '.join(map(repr, missing))} in {target} (declared: {known})")
    text = ""
    if args_file is not None:
        try:
            text = args_file.read_text()
        except OSError as exc:
            raise fail(f"cannot read {args_file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise fail(f"{args_file} is not UTF-8 text (sample arguments are JSON)") from None

    def takes_arguments(name: str) -> bool:
        params = list(app.jobs[name].signature.parameters.values())[1:]
        return any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)

    try:
        samples = parse_samples(text, str(args_file or "--args"), jobs, takes_arguments)
        options = DrillOptions(target=target, jobs=jobs, samples=samples, faults=faults, seconds=seconds,
                               settle=settle, rate=rate, workers=workers, concurrency=concurrency, seed=seed,
                               keep=keep)
        check_samples(app, options)  # a bad sample is one line, before the warning and the question
    except FiresafeError as exc:
        raise fail(str(exc)) from None
    _warn_and_confirm(jobs, seconds, yes)
    try:
        err = console(stderr=True)
        report = run_drill(app, options, progress=None if as_json else lambda t: err.print(data(f"drill: {t}", "dim")))
    except FiresafeError as exc:
        raise fail(str(exc)) from None
    if as_json:
        echo_json(report.as_dict())
    else:
        _render(report)
    if report.violations:
        click.echo(click.style(f"drill: {report.violations} broken invariant(s); see above", fg="red"), err=True)
        raise SystemExit(1)


def warning(jobs: tuple[str, ...], seconds: float) -> str:
    """What a drill does for real, said before it starts."""
    names = ", ".join(jobs)
    return (f"drill: the code of job(s) {names} runs for real, again and again for {seconds:g}s plus the "
            "settle time: whatever it does outside firesafe (charges, e-mails, HTTP calls to your providers) "
            "happens at every attempt, and each round of samples has new job keys, so idempotency keys "
            "passed to providers differ from round to round. Only the store is a scratch copy (yours is "
            "never opened). Point these jobs at test or sandbox providers first.")


def _warn_and_confirm(jobs: tuple[str, ...], seconds: float, yes: bool) -> None:
    """Say what runs for real, before anything runs; then ask (or take --yes)."""
    click.echo(plain(warning(jobs, seconds)), err=True)
    if yes:
        return
    if not is_interactive():
        raise fail("refusing to run the drill without confirmation: stdin is not a terminal. Pass --yes to "
                   "run the jobs' code (and its side effects) for real")
    if not click.confirm("Run these jobs for real now?", default=False, err=True):
        raise fail("not confirmed; nothing ran")


def _render(report: Any) -> None:
    out = console()
    table = Table(title=f"firesafe drill: {report.seconds:g}s of faults ({', '.join(report.faults) or 'none'}, "
                        f"rate {report.rate:g}, seed {report.seed})", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("job", "left"), ("runs", "right"), ("succeeded", "right"), ("dead", "right"), ("attempts", "right"),
        ("resumes", "right"), ("steps restored", "right"), ("steps re-run", "right"), ("alerts", "right"),
        ("faults", "left"), ("invariants", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for j in report.jobs:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(j.faults.items())) or "-"
        dead = str(j.dead) + (f" ({', '.join(f'{k} {v}' for k, v in sorted(j.dead_reasons.items()))})"
                              if j.dead_reasons else "")
        verdict = Text(f"{len(j.violations)} broken", style="bold red") if j.violations else Text("kept", style="green")
        rerun = f"{j.steps_rerun} ({j.steps_repeatable} repeatable)" if j.steps_repeatable else str(j.steps_rerun)
        table.add_row(data(j.name), str(j.runs), str(j.succeeded), data(dead), str(j.attempts), str(j.resumes),
                      str(j.steps_restored), rerun, str(j.alerts), faults, verdict)
    out.print(table)
    for j in report.jobs:
        for v in j.violations[:10]:
            out.print(data(f"  broken ({j.name}): {v}", style="red"))
        if len(j.violations) > 10:
            out.print(data(f"  ... and {len(j.violations) - 10} more ({j.name})", style="red"))
        for w in dict.fromkeys(j.warnings[:5]):
            out.print(data(f"  warning ({j.name}): {w}", style="yellow"))
    out.print(data(f"store faults injected: {report.store_faults}; "
                   f"scratch store: {report.kept or 'deleted'}; {report.worker_starts} worker process start(s); "
                   f"settled in {report.settle_seconds:.1f}s."))
    out.print(data("Your store was not opened (the jobs ran on a scratch store) and no alert was sent. "
                   f"Your jobs' code ran for real: {report.effects()}; each side effect outside firesafe "
                   "(a charge, an e-mail, an HTTP call) happened each time the code making it ran.", style="yellow"))
