"""The ``firesafe`` command line (entry point: :func:`firesafe.cli.main.main`)."""
