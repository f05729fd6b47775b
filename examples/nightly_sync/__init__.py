"""A nightly sync whose workers were down all weekend: catch-up, a dead window, a backfill."""
