"""manage.py inject_fault reclaim NODE... [--grace S] [--notice-id ID]: faults on demand, for tests, the
soak and operators rehearsing them."""

import datetime as dt

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from scheduler_app.models import Node
from scheduler_app.services.migration import reclaim_node

SOURCE = "fault injection"


class Command(BaseCommand):
    help = "Inject a fault. reclaim: spot nodes get a reclaim notice, as their cloud would send it."

    def add_arguments(self, parser):
        faults = parser.add_subparsers(dest="fault", required=True)
        reclaim = faults.add_parser("reclaim", help="Send spot nodes a reclaim notice.")
        reclaim.add_argument("nodes", nargs="+", help="Node names.")
        reclaim.add_argument("--grace", type=int, default=120, help="Seconds until the deadline.")
        reclaim.add_argument(
            "--notice-id", default="", help="The notice's id (the same id twice is a no-op)."
        )

    def handle(self, *args, fault, **options):
        if fault == "reclaim":
            self._reclaim(options["nodes"], options["grace"], options["notice_id"])

    def _reclaim(self, names: list[str], grace_s: int, notice_id: str) -> None:
        nodes = {node.name: node for node in Node.objects.filter(name__in=names).select_related("pool")}
        if missing := [name for name in names if name not in nodes]:
            raise CommandError(f"No node named {', '.join(missing)}.")
        if grace_s < 0:
            raise CommandError("--grace is 0 or more seconds.")
        deadline = timezone.now() + dt.timedelta(seconds=grace_s)
        for name in names:
            try:
                stopping = reclaim_node(nodes[name], deadline=deadline, source=SOURCE, notice_id=notice_id)
            except ValidationError as error:
                raise CommandError(f"{name}: {' '.join(error.messages)}") from None
            self.stdout.write(f"{name}: reclaimed, {stopping} job(s) stop by {deadline:%H:%M:%S} UTC")
