from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand

from scheduler_app.dispatch import embedded_ticker, embedded_worker


class Command(BaseCommand):
    help = "Serve the portal over ASGI (Daphne); without REDIS_URL, also run the worker and live ticker."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        if not settings.REDIS_URL:
            embedded_worker.start()
            embedded_worker.wake()
            embedded_ticker.start()
        try:
            CommandLineInterface().run(["-b", host, "-p", str(port), "portal.asgi:application"])
        finally:
            if not settings.REDIS_URL:
                embedded_worker.stop()
                embedded_ticker.stop()
