from daphne.cli import CommandLineInterface  # installs Daphne's Twisted reactor: import it first
from django.conf import settings
from django.core.management.base import BaseCommand
from twisted.internet import reactor, threads

from scheduler_app.passes.dispatch import (
    embedded_notifications,
    embedded_slurm,
    embedded_ticker,
    embedded_what_if,
    embedded_worker,
)


class Command(BaseCommand):
    help = (
        "Serve the portal over ASGI with Daphne; without REDIS_URL, also run the worker and the live "
        "ticker in-process. "
        "--simulated-agents also runs a node agent on simulated GPUs for every node (the demo): lost "
        "ones too, back in service once their agents register."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--simulated-agents", action="store_true", help="The demo: agents on simulated NVML."
        )

    def handle(self, *args, host, port, simulated_agents, **options):
        agents, daphne = None, ["-b", host, "-p", str(port)]
        if simulated_agents:
            from demo.agents import SimulatedAgents

            agents = SimulatedAgents(f"http://127.0.0.1:{port}")
            agents.start()
            # Stop them while the server still answers, so their jobs' last output and exits reach it:
            # the reactor waits for the deferred, serving meanwhile, before it closes its ports.
            reactor.addSystemEventTrigger("before", "shutdown", threads.deferToThread, agents.stop)
            # The agents call every second or two: their lines would bury the console's.
            access_log = settings.VAR_DIR / "access.log"
            daphne += ["--access-log", str(access_log)]
            self.stdout.write(f"HTTP access log: {access_log}")
        if not settings.REDIS_URL:
            embedded_worker.start()  # its first round runs every entry of the schedule, a pass among them
            embedded_ticker.start()
            embedded_what_if.start()
            embedded_slurm.start()
            embedded_notifications.start()
        try:
            CommandLineInterface().run([*daphne, "portal.asgi:application"])
        finally:
            if not settings.REDIS_URL:
                embedded_worker.stop()
                embedded_ticker.stop()
                embedded_what_if.stop()
                embedded_slurm.stop()
                embedded_notifications.stop()
