"""Load the Celery app with Django (Celery's Django guide), so every process sends tasks to REDIS_URL."""

from .celery import app as celery_app

__all__ = ("celery_app",)
