from decimal import Decimal

import pytest

from portal.templatetags.portal_format import duration, gpus, usd


@pytest.mark.parametrize(("milli", "said"), [(250, "0.25"), (8000, "8"), (0, "0"), (None, "0")])
def test_milli_gpu_reads_as_gpus(milli, said):
    assert gpus(milli) == said


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(900, "15 min"), (5400, "1 h 30 min"), (3600, "1 h"), (61, "1 min 1 s"), (None, "none")],
)
def test_durations_read_as_people_say_them(seconds, said):
    assert duration(seconds) == said


@pytest.mark.parametrize(
    ("amount", "said"),
    [
        ("4.775000", "$4.775"),  # a price as the catalog stores it: six places, three of them needed
        (Decimal("4.770000"), "$4.77"),
        (Decimal("3"), "$3.00"),
        (Decimal("0.0625"), "$0.0625"),  # an eighth of $0.50: cents would say $0.06
        (Decimal("0.1234567"), "$0.1235"),  # never more than four places, rounded half up
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("-2.5"), "-$2.50"),
        (None, "—"),
    ],
)
def test_money_shows_cents_and_more_places_only_where_the_amount_has_them(amount, said):
    assert usd(amount) == said
