import pytest

from portal.templatetags.portal_format import duration, gpus


@pytest.mark.parametrize(("milli", "said"), [(250, "0.25"), (8000, "8"), (0, "0"), (None, "0")])
def test_milli_gpu_reads_as_gpus(milli, said):
    assert gpus(milli) == said


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(900, "15 min"), (5400, "1 h 30 min"), (3600, "1 h"), (61, "1 min 1 s"), (None, "none")],
)
def test_durations_read_as_people_say_them(seconds, said):
    assert duration(seconds) == said
