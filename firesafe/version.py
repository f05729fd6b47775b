"""firesafe's version (``firesafe.__version__``), importable from every layer without the package's API."""

__version__ = "0.1.0"
