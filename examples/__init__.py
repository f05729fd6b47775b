"""Runnable examples: each one tells a story of failure and recovery on a fresh SQLite file.

Run one with ``python -m examples.<name>`` from the repository root; its README says what to watch
for, and ``tests/examples/`` checks that it does what its README promises.
"""
