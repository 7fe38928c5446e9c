from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "teams"
    verbose_name = "Teams and access"

    def ready(self):
        from teams import receivers  # noqa: F401  (connects the receivers)
