"""Part 2, bounded retries: backoff with jitter and the pure decision of what an attempt leads to."""

from firesafe.retries.backoff import Backoff
from firesafe.retries.decide import Decision, decide

__all__ = ["Backoff", "Decision", "decide"]
