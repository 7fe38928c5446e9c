"""Celery tasks of the shared infrastructure: thin wrappers that call one function each."""

from celery import shared_task

from infra.idempotency import forget_expired_keys


@shared_task(name="portal.forget_idempotency_keys", ignore_result=True)
def forget_idempotency_keys() -> int:
    return forget_expired_keys()
