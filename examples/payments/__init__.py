"""Refunds against a flaky payment provider: keys, a limiter, a dead letter, an alert, a replay."""
