"""Enqueue inside the transaction of the ORM your application already uses.

``job.enqueue(..., conn=...)`` on the PostgreSQL store takes a psycopg 3 connection and writes the job
in that connection's open transaction, so the job exists if and only if the transaction commits.
An ORM keeps that connection under its own objects; each module here hands it over:

- :func:`firesafe.integrations.sqlalchemy.conn_of` for a SQLAlchemy ``Session`` or ``Connection``,
  and :func:`~firesafe.integrations.sqlalchemy.aconn_of` for an ``AsyncSession`` or ``AsyncConnection``
  (``await job.enqueue_async(..., conn=...)``);
- :func:`firesafe.integrations.django.conn_of` for Django's connection inside ``transaction.atomic()``.

Neither SQLAlchemy nor Django is imported until one of these functions is called, so firesafe
imports without them.
"""
