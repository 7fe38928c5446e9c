from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry"

    def ready(self):
        # The scheduler's live ticker shows the cards' latest readings; it may not import telemetry.
        from scheduler_app.live.readings import register_latest_readings
        from telemetry.selectors import latest_card_readings

        register_latest_readings(latest_card_readings)
