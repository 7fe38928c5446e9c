from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The embedded default's demo: no models, only the seed_demo command and the simulated node agents."""

    name = "demo"
    verbose_name = "Demo"
