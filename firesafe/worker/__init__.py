"""Workers: claim jobs, run attempts, save their outcomes, rescue what dead workers left."""

from firesafe.worker.worker import Turn, Worker

__all__ = ["Turn", "Worker"]
