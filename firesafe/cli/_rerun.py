"""``firesafe rerun``: run a finished job again under its key, resuming from its recorded steps."""

from __future__ import annotations

import click

from firesafe.cli._common import actor_options, echo_json, json_option, open_app, plain, store_option
from firesafe.deadletters.audit import actor_of, reason_of


@click.command(short_help="Run a finished job again: resume, --from-step NAME or --from-scratch.")
@click.argument("key")
@click.option("--from-step", "from_step", metavar="NAME", default=None,
              help="Forget this step and every later one, then run.")
@click.option("--from-scratch", is_flag=True, help="Forget every recorded step.")
@actor_options
@json_option
@store_option
def rerun(key: str, from_step: str | None, from_scratch: bool, actor: str | None, reason: str | None, as_json: bool,
          store_url: str | None) -> None:
    """Run the finished (dead, cancelled or succeeded) job KEY again under the same key.

    By default it resumes: recorded steps are restored, not run again. The attempt budget is
    renewed, the history kept, and a `rerun` event records who asked (--actor, else
    $FIRESAFE_ACTOR, else user@host) and why (--reason). A worker runs it.

    A job dead with NonDeterminism met other steps than it recorded (its code changed): resuming
    fails the same way, so rerun it --from-step (the first step that differs) or --from-scratch.
    A job declared on_divergence="rerun" does that by itself (docs/steps.md).

    \b
    Examples:
      firesafe rerun agent:42                    # resume from the last completed step
      firesafe rerun agent:42 --from-step turn-7  # re-run turn 7 and everything after it
      firesafe rerun refund:o-1 --from-scratch --reason "provider fixed the bug"
    """
    if from_step is not None and from_scratch:
        raise click.UsageError("give --from-step NAME or --from-scratch, not both (--from-scratch forgets every "
                               "step already)")
    app = open_app(store_url)
    who, why = actor_of(actor), reason_of(reason)
    job = app.rerun(key, from_step=from_step, from_scratch=from_scratch, actor=who, reason=why)
    steps = app.steps(key)
    if as_json:
        echo_json({"key": job.key, "state": str(job.state), "steps_kept": [s["name"] for s in steps],
                   "actor": who, "reason": why})
        return
    kept = ", ".join(s["name"] for s in steps) or "none"
    click.echo(plain(f"{key}: queued again; steps kept (restored, not re-run): {kept}"))
