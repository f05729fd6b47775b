"""Part 3, dead letters: jobs that failed for good, kept with their trace, to inspect, replay or discard."""

from firesafe.deadletters.dlq import DeadLetters, ReviewResult

__all__ = ["DeadLetters", "ReviewResult"]
