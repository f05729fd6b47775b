"""``python -m firesafe``: the same as the ``firesafe`` command."""

from firesafe.cli.main import main

if __name__ == "__main__":
    main()
