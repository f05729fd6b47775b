"""Part 4, the rerun story: durable steps that resume from their checkpoint, durable sleeps, reruns."""

from firesafe.steps.steps import (
    DuplicateStep,
    LeaseLost,
    NonDeterminism,
    SignalWait,
    StepError,
    Steps,
    is_repeatable,
    repeatable,
    step_key,
)

__all__ = ["DuplicateStep", "LeaseLost", "NonDeterminism", "SignalWait", "StepError", "Steps", "is_repeatable",
           "repeatable", "step_key"]
