"""Who hears of a job's failures: the alert policy of a job and of each error class within it.

A policy is declared with the job (``@app.job(alert=AlertPolicy(...))``) and read by the
dispatcher when it groups alert events (pure decisions, invariant 6: no store, no clock). It sets
the severity of the job's dead-letter alerts, mutes them, or does either per error class; a sink
takes the severities it is given (``Webhook(..., min_severity="critical")``). A muted alert is
still recorded (``firesafe alerts ls`` shows it, the job is in the dead letters) but is sent to
no sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from firesafe.alerts.grouping import KINDS, SEVERITIES
from firesafe.errors import ConfigError

#: What an error class may map to besides a severity: recorded, sent to no sink.
MUTE = "mute"
#: The kinds of alert about one job that a policy governs: its dead letters (severity, mute and
#: error classes) and its failure rate (mute only).
DEAD_LETTER = "dead_letter"
RATE_KINDS = ("failure_rate", "failure_rate_resolved")


class Verdict(NamedTuple):
    """What becomes of an alert event: the severity of the alert it joins, and whether it is muted."""

    severity: str
    muted: bool = False


def _check_severity(value: object, what: str, *, mute: bool = False) -> str:
    allowed = (*SEVERITIES, MUTE) if mute else SEVERITIES
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"AlertPolicy: {what} must be one of {', '.join(repr(a) for a in allowed)}, not {value!r}")
    return value


def _error_name(error: object) -> str:
    if isinstance(error, str) and error.isidentifier():
        return error
    if isinstance(error, type) and issubclass(error, BaseException):
        return error.__name__
    raise ConfigError(f"AlertPolicy: errors maps exception classes (or their names) to a severity or "
                      f"'mute', not {error!r}")


@dataclass(frozen=True)
class AlertPolicy:
    """The alert policy of a job.

    ``severity``: of the job's dead-letter alerts (``critical``, ``warning`` or ``info``);
    ``mute``: record them without sending them; ``errors``: per error class, a severity or
    ``"mute"``, which wins over the job's own (so ``mute=True, errors={DiskFull: "critical"}``
    pages only for a full disk). An error class matches the class a job's last attempt raised,
    by name (what the trace records); :class:`firesafe.Permanent` also matches every failure
    given up for good on purpose (a ``Permanent`` subclass, or a class of ``give_up_on``).

    >>> class CardDeclined(Exception): ...
    >>> p = AlertPolicy(errors={CardDeclined: "info", TimeoutError: "warning", "Chargeback": "mute"})
    >>> p.decide("CardDeclined", "exhausted"), p.decide("ValueError", "exhausted")
    (Verdict(severity='info', muted=False), Verdict(severity='critical', muted=False))
    >>> p.decide("Chargeback", "permanent")
    Verdict(severity='critical', muted=True)
    """

    severity: str = "critical"
    mute: bool = False
    errors: Mapping[type[BaseException] | str, str] = field(default_factory=dict)
    _by_name: dict[str, str] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        _check_severity(self.severity, "severity")
        if not isinstance(self.mute, bool):
            raise ConfigError(f"AlertPolicy: mute must be True or False, not {self.mute!r}")
        if not isinstance(self.errors, Mapping):
            raise ConfigError("AlertPolicy: errors must be a dict like {CardDeclined: 'info', TimeoutError: 'mute'}")
        by_name: dict[str, str] = {}
        for error, verdict in self.errors.items():
            name = _error_name(error)
            if name in by_name:
                raise ConfigError(f"AlertPolicy: two error classes named {name!r}; the trace records only the "
                                  "name, so give one of them")
            by_name[name] = _check_severity(verdict, f"the verdict of {name}", mute=True)
        object.__setattr__(self, "_by_name", by_name)

    @classmethod
    def of(cls, value: AlertPolicy | str | None, job: str) -> AlertPolicy | None:
        """A job's ``alert=`` argument as a policy: a policy, a severity, ``"mute"`` or None.

        >>> AlertPolicy.of("warning", "sync").severity, AlertPolicy.of("mute", "sync").mute
        ('warning', True)
        """
        if value is None or isinstance(value, AlertPolicy):
            return value
        if isinstance(value, str) and value in (*SEVERITIES, MUTE):
            return cls(mute=True) if value == MUTE else cls(severity=value)
        raise ConfigError(f"job {job!r}: alert= takes an AlertPolicy, a severity ({', '.join(SEVERITIES)}) "
                          f"or 'mute', not {value!r}")

    def decide(self, error_type: str | None, reason: str | None) -> Verdict:
        """The verdict on a dead letter whose last attempt raised ``error_type`` and ended for ``reason``."""
        verdict = self._by_name.get(error_type or "")
        if verdict is None and reason == "permanent":
            verdict = self._by_name.get("Permanent")
        if verdict is None:
            return Verdict(self.severity, self.mute)
        return Verdict(self.severity, True) if verdict == MUTE else Verdict(verdict, False)


def verdict(kind: str, payload: Mapping[str, Any], policy: AlertPolicy | None, severity: str | None = None) -> Verdict:
    """The verdict on one alert event of ``kind`` about a job whose policy is ``policy``
    (``severity``: the event's own, else its kind's).

    >>> verdict("dead_letter", {"error_type": "CardDeclined"}, None)
    Verdict(severity='critical', muted=False)
    >>> verdict("dead_letter", {"error_type": "X", "reason": "permanent"}, AlertPolicy(errors={"Permanent": "info"}))
    Verdict(severity='info', muted=False)
    >>> verdict("failure_rate", {}, AlertPolicy(mute=True)), verdict("queue_stuck", {}, AlertPolicy(mute=True))
    (Verdict(severity='warning', muted=True), Verdict(severity='critical', muted=False))
    """
    own = severity or (KINDS[kind].severity if kind in KINDS else "critical")
    if policy is None:
        return Verdict(own, False)
    if kind == DEAD_LETTER:
        return policy.decide(payload.get("error_type"), payload.get("reason"))
    if kind in RATE_KINDS:
        return Verdict(own, policy.mute)
    return Verdict(own, False)


def route_severity(kind: str, severity: str) -> str:
    """The severity a sink's routing reads: a resolution goes where what it resolves went.

    >>> route_severity("queue_stuck_resolved", "info"), route_severity("failure_rate", "warning")
    ('critical', 'warning')
    """
    spec = KINDS.get(kind)
    if spec is not None and spec.resolves and spec.resolves in KINDS:
        return KINDS[spec.resolves].severity
    return severity


def check_routing(severities: Any, min_severity: Any, owner: str) -> frozenset[str]:
    """A sink's ``severities`` / ``min_severity`` as the set of severities it takes.

    >>> sorted(check_routing(None, "warning", "Slack"))
    ['critical', 'warning']
    >>> sorted(check_routing(("info",), None, "Log")), len(check_routing(None, None, "Log"))
    (['info'], 3)
    """
    if severities is not None and min_severity is not None:
        raise ConfigError(f"{owner}: give severities=(...) or min_severity=..., not both")
    if min_severity is not None:
        _check_severity(min_severity, f"{owner}: min_severity")
        return frozenset(SEVERITIES[:SEVERITIES.index(min_severity) + 1])
    if severities is None:
        return frozenset(SEVERITIES)
    if isinstance(severities, str):
        severities = (severities,)
    try:
        chosen = frozenset(_check_severity(s, f"{owner}: each of severities") for s in severities)
    except TypeError:
        raise ConfigError(f"{owner}: severities takes a tuple like ('critical', 'warning')") from None
    if not chosen:
        raise ConfigError(f"{owner}: severities=() would send nothing; leave the sink out instead")
    return chosen
