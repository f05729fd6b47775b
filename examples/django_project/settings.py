"""Settings of the example: one PostgreSQL database, shared by Django's tables and firesafe's.

``DATABASE_URL`` names the server and database; ``DJANGO_DB_SCHEMA`` (optional) puts Django's
tables in a schema of their own (the tests use one per run); firesafe keeps its tables in its own
schema, ``FIRESAFE_STORE``'s ``?schema=`` (default ``firesafe``). Both must be on the same database:
the job is written by Django's connection, in Django's transaction.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
FIRESAFE_STORE = os.environ.get("FIRESAFE_STORE", DATABASE_URL)

_db = urlsplit(DATABASE_URL)
_schema = os.environ.get("DJANGO_DB_SCHEMA")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 underneath (firesafe joins no other)
        "NAME": _db.path.lstrip("/"),
        "USER": _db.username or "",
        "PASSWORD": _db.password or "",
        "HOST": _db.hostname or "",
        "PORT": str(_db.port or ""),
        "OPTIONS": {"options": f"-c search_path={_schema}"} if _schema else {},
    }
}

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
INSTALLED_APPS = ["examples.django_project.shop"]
ROOT_URLCONF = "examples.django_project.urls"
MIDDLEWARE: list[str] = []
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
