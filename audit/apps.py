from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from audit.events import log_event
        from teams.changes import record_changes_with

        record_changes_with(log_event)  # teams sits below the log: it records its changes through this
