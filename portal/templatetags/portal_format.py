"""Small formatting filters for the pages."""

from django import template

from portal import money
from scheduler_app.constants import MILLI_PER_GPU

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
    """Money in US dollars: cents, more places only where the amount has them (portal.money.usd)."""
    return money.usd(amount)
