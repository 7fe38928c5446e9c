from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand

from scheduler_app.dispatch import embedded_worker


class Command(BaseCommand):
    help = "Serve the portal over ASGI with Daphne; without REDIS_URL, also run the worker in-process."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        if not settings.REDIS_URL:
            embedded_worker.start()
            embedded_worker.wake()
        try:
            CommandLineInterface().run(["-b", host, "-p", str(port), "portal.asgi:application"])
        finally:
            if not settings.REDIS_URL:
                embedded_worker.stop()
