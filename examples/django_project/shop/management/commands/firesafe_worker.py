"""``manage.py firesafe_worker``: run a firesafe worker inside Django, so jobs can use the ORM."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from examples.django_project.shop.tasks import app


class Command(BaseCommand):
    help = "Run a firesafe worker for the shop's jobs (--burst: until nothing is runnable, then exit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", action="append", dest="queues", help="queue to work (repeatable)")
        parser.add_argument("--burst", action="store_true", help="exit once nothing is runnable")
        parser.add_argument("--concurrency", type=int, default=4)

    def handle(self, *args: Any, **options: Any) -> None:
        summary = app.work(options["queues"] or ["shipping"], burst=options["burst"],
                           concurrency=options["concurrency"])
        if options["burst"]:
            self.stdout.write(f"succeeded: {summary.succeeded}")
