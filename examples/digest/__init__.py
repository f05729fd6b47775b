"""A daily digest whose send failed while the workers were down: the catch-up sends it once."""
