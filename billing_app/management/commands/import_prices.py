"""Price the pools from the public cloud GPU prices: the median per GPU model and capacity type."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from billing_app.public_prices import PriceFileError, read_public_prices
from billing_app.services import default_public_prices_path, price_pools_from_public


class Command(BaseCommand):
    help = (
        "Read the public GPU price file (default ../shared/prices/cloud_gpu_prices.csv beside the "
        "repository) and price each pool at the median per-GPU-hour price of its GPU model and "
        "capacity type. The file is read whole first: a missing or malformed file writes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", type=Path, help="the CSV file (default: %(default)s)")
        parser.add_argument("--dry-run", action="store_true", help="print the medians; write nothing")
        parser.add_argument(
            "--only-unpriced", action="store_true", help="leave pools that already have a price alone"
        )

    def handle(self, *args, path=None, dry_run=False, only_unpriced=False, **options):
        try:
            public = read_public_prices(path or default_public_prices_path())
        except PriceFileError as error:
            raise CommandError(f"{error} Nothing was written.") from None
        self.stdout.write(
            f"Read {public.rows_read} rows from {public.path} "
            f"({public.rows_skipped} skipped: no GPU model or no price)."
        )
        if dry_run:
            for median in sorted(public.medians.values(), key=lambda m: (m.gpu_model, m.capacity_type)):
                self.stdout.write(
                    f"  {median.gpu_model:<14} {median.capacity_type:<9} "
                    f"{median.usd_per_gpu_hour} USD/GPU-h (median of {median.count})"
                )
            return
        for result in price_pools_from_public(public, only_unpriced=only_unpriced):
            if result.price is None:
                self.stdout.write(f"  {result.pool.name}: not changed ({result.note})")
            else:
                self.stdout.write(
                    self.style.SUCCESS(
                        f"  {result.pool.name}: {result.price.usd_per_gpu_hour} USD/GPU-h ({result.note})"
                    )
                )
