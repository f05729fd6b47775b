"""Alerts that carry the trace: dead letters, failure rates, stuck queues and more, told to people.

>>> from firesafe.alerts import Webhook, Slack, Email, Log
>>> Log().name, Email(smtp="smtp://mail.internal:25", to=["oncall@example.com"]).name
('log', 'email')

Alert events are written in the transaction of the event that raised them (an outbox); workers
(and the dashboard) group them by the jobs' :class:`AlertPolicy` (severity, muting) so that a storm
becomes a handful of alerts that carry its count, and deliver them to the sinks that take their
severity, with retries. See docs/alerts.md.
"""

from firesafe.alerts.policy import AlertPolicy
from firesafe.alerts.sinks import DeliveryError, Email, Log, Sink, Slack, Webhook, sign, verify_signature

__all__ = ["AlertPolicy", "DeliveryError", "Email", "Log", "Sink", "Slack", "Webhook", "sign", "verify_signature"]
