"""``firesafe signal``: send a named signal, with JSON data, to a job that waits (or will wait) for it."""

from __future__ import annotations

from typing import Any

import click

from firesafe.alerts.render import iso
from firesafe.cli._common import JSONValue, actor_options, dumps, echo_json, json_option, open_app, plain, store_option
from firesafe.cli._render import signal_dict
from firesafe.masking import mask


@click.command(short_help="Send a signal with JSON data to a job waiting for it.")
@click.argument("key")
@click.argument("name")
@click.option("--data", "data", type=JSONValue(object), default="null", metavar="JSON",
              help="The signal's data, any JSON value: '{\"approved\": true}', '\"yes\"', 42 (default null).")
@actor_options
@json_option
@store_option
def signal(key: str, name: str, data: Any, actor: str | None, reason: str | None, as_json: bool,
           store_url: str | None) -> None:
    """Send signal NAME with JSON data to the job KEY (its `ctx.wait_for_signal(NAME)` returns the data).

    A job parked waiting for NAME runs again at once; a job that does not wait yet keeps the signal
    until it does. A signal is delivered once: sending the same one again changes nothing, sending
    it with other data is refused. The job's `signal_sent` event records who (--actor, else
    $FIRESAFE_ACTOR, else user@host) and why (--reason). A finished job takes no signal.

    \b
    Examples:
      firesafe signal refund:o-9 approval --data '{"approved": true, "note": "ok"}' --reason "ticket 81"
      firesafe signal agent:42 approval --data '{"approved": false}' --actor ann --json
    """
    app = open_app(store_url)
    sent = app.signal(key, name, data, actor=actor, reason=reason)  # it says who, else the default actor
    kept = sent.signal
    if as_json:
        echo_json({"key": sent.key, "name": sent.name, "sent": sent.sent, "woke": sent.woke, **signal_dict(kept)})
        return
    if not sent.sent:
        click.echo(plain(f"{key}: signal {name!r} was sent already by {kept.actor} at {iso(kept.sent_at)}, "
                         "with the same data; it is delivered once, nothing changed"))
        return
    then = ("the job was waiting for it and runs now" if sent.woke
            else "kept until the job waits for it (or, if it is running, as it parks)")
    click.echo(plain(f"{key}: signal {name!r} sent with {dumps(mask(kept.value()))}; {then}"))
