from django.apps import AppConfig


class InfraConfig(AppConfig):
    """The shared infrastructure every app may use (bulk insert, the API's base classes, authentication,
    throttling, idempotency, the live publisher, the admin base, Redis and PostgreSQL plumbing). It
    imports no app: tests/test_import_graph.py holds it to that."""

    name = "infra"
    verbose_name = "Infrastructure"

    def ready(self) -> None:
        from infra import lookups  # noqa: F401 (registers `in_array`)
