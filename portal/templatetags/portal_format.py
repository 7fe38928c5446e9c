"""Small formatting filters for the pages."""

from django import template
from django.utils import timezone

from infra import money
from scheduler_app.constants import MILLI_PER_GPU
from scheduler_app.core.shares import share_label

register = template.Library()


@register.filter
def gpus(milli: int) -> str:
    """Milli-GPU as GPUs: 250 -> '0.25', 8000 -> '8'."""
    return f"{(milli or 0) / MILLI_PER_GPU:g}"


@register.filter
def duration(seconds: int | None) -> str:
    """Seconds as people say them: 900 -> '15 min', 5400 -> '1 h 30 min'."""
    if not seconds:
        return "none"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p)


@register.filter(name="usd")
def usd(amount) -> str:
    """Money in US dollars: cents, more places only where the amount has them (infra.money.usd)."""
    return money.usd(amount)


@register.filter
def share(milli: int) -> str:
    """A slice of one card as people say it: 500 -> '1/2 GPU', 1000 -> '1 GPU'."""
    return share_label(milli, 1)


@register.filter
def mib(value: int | None) -> str:
    """MiB as people read memory: 81920 -> '80 GiB', 1536 -> '1.5 GiB', 512 -> '512 MiB'."""
    value = value or 0
    return f"{value / 1024:g} GiB" if value >= 1024 else f"{value} MiB"


@register.filter
def run_time(segments) -> str:
    """How long a request's work ran, from its slices (allocation segments): each stretch once (a gang's
    cards share one), an open one until now, to the minute beyond an hour; "" when it never ran."""
    spans = {(s.started_at, s.ended_at or timezone.now()) for s in segments}
    if not spans:
        return ""
    seconds = max(1, round(sum((end - start).total_seconds() for start, end in spans)))
    return duration(seconds if seconds < 3600 else round(seconds / 60) * 60)
