from daphne.cli import CommandLineInterface
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the portal over ASGI (HTTP and websockets) with Daphne."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host, port, **options):
        CommandLineInterface().run(["-b", host, "-p", str(port), "portal.asgi:application"])
