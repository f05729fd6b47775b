"""A multi-turn agent whose worker is killed mid-run and resumes from its last completed turn."""
