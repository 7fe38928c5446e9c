from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notification channels"

    def ready(self):
        from audit.events import follow_events
        from notifications.outbox import enqueue_deliveries

        follow_events(enqueue_deliveries)  # the log sits below: it hands each batch of events over
