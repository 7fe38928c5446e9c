"""manage.py slurm_check_billing [--since TIME] [--source rest|sacct]: the portal's billed time of each
ended Slurm run against Slurm's own record; exits non-zero when one differs by more than a second."""

import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from slurm_backend.billing_check import SOURCES, TOLERANCE_S, check_billing
from slurm_backend.client import SlurmError, SlurmUnavailable


def moment(text: str) -> dt.datetime:
    parsed = parse_datetime(text)
    if parsed is None:
        raise CommandError(f"--since {text!r} is not a time: give e.g. 2026-12-06T08:00:00Z.")
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=dt.UTC)


class Command(BaseCommand):
    help = (
        "Compare each ended Slurm run's elapsed time in the portal's segments with Slurm's record "
        "(slurmrestd's /jobs, or sacct with slurmdbd); "
        f"exit 1 when one differs by more than {TOLERANCE_S:g} s."
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", help="Runs that ended since (UTC when no offset); default: a day ago.")
        parser.add_argument(
            "--source",
            choices=SOURCES,
            default="rest",
            help="rest: slurmrestd's /jobs (ended jobs for MinJobAge); sacct: Slurm's accounting (slurmdbd).",
        )

    def handle(self, *args, since=None, source="rest", **options):
        start = moment(since) if since else timezone.now() - dt.timedelta(days=1)
        try:
            checks = check_billing(start, source)
        except (SlurmUnavailable, SlurmError, OSError) as error:
            raise CommandError(f"Slurm's record cannot be read: {error}") from None
        differing = [c for c in checks if c.differs()]
        unknown = [c for c in checks if c.slurm_s is None]
        for c in checks:
            said = "not in Slurm's record" if c.slurm_s is None else f"Slurm {c.slurm_s:.0f} s"
            said += ", stopped by the portal" if c.stopped else ""
            mark = "DIFFERS" if c.differs() else "ok" if c.slurm_s is not None else "unchecked"
            self.stdout.write(
                f"{mark}: pool {c.pool} job {c.job_id} (request {c.request_id} run {c.generation}): "
                f"billed {c.portal_s:.1f} s, {said}"
            )
        summary = f"{len(checks)} ended run(s): {len(differing)} differ by more than {TOLERANCE_S:g} s"
        summary += f", {len(unknown)} unchecked." if unknown else "."
        if differing:
            raise CommandError(summary)
        self.stdout.write(summary)
