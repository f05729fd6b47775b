"""``make demo``: firesafe's recovery story, scripted, on a fresh SQLite file (``python -m demo``)."""
