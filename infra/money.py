"""Money as the pages say it: US dollars with cents, and more places only where the amount has them.

A price per GPU-hour is stored with six places ("4.775000") and a slice pays a fraction of it (an eighth
of $0.50 is $0.0625 an hour): cents alone would misstate it, six places bury it. So: at least two
places, at most four (rounded half up), the zeros past the cents dropped. static/js/format.js says it
the same way in the browser."""

import re
from decimal import ROUND_HALF_UP, Decimal

SHOWN_PLACES = Decimal("0.0001")
NO_AMOUNT = "—"


def usd(amount: Decimal | str | int | None) -> str:
    """'$4.775' for 4.775000, '$3.00' for 3, '$1,234.50', '-$2.50'; '—' for None or ''."""
    if amount is None or amount == "":
        return NO_AMOUNT
    value = Decimal(str(amount)).quantize(SHOWN_PLACES, rounding=ROUND_HALF_UP)
    text = re.sub(r"0{1,2}$", "", f"{abs(value):,.4f}")  # 4.7750 -> 4.775, 4.7700 -> 4.77, never below cents
    return f"{'-' if value < 0 else ''}${text}"
