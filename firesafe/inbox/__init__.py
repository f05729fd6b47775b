"""The event inbox: redelivered events become exactly-once effects (webhooks and a broker consumer)."""

from firesafe.inbox.events import EventConflict, Inbox, InboxEvent, Ingested, Source
from firesafe.inbox.verify import Bearer, Hmac, StripeSignature, Unverified

__all__ = ["Bearer", "EventConflict", "Hmac", "Inbox", "InboxEvent", "Ingested", "Source", "StripeSignature",
           "Unverified"]
