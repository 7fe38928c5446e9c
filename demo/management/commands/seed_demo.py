from django.core.management.base import BaseCommand

from demo.seed import DEMO_PASSWORD, seed_demo


class Command(BaseCommand):
    help = "Create the demo cluster, teams and users (idempotent: keeps existing data)."

    def handle(self, *args, **options):
        usernames = seed_demo()
        self.stdout.write(self.style.SUCCESS("Demo cluster ready."))
        self.stdout.write(f"Log in with any of {', '.join(usernames)} and the password {DEMO_PASSWORD!r}")
        self.stdout.write(
            "  ops: platform operator (staff, admin site); alice/carol: team admins; bob/dave: members"
        )
