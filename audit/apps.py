from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self):
        from audit.receivers import record_teams_change
        from teams.signals import changed

        changed.connect(record_teams_change, dispatch_uid="audit.record_teams_change")
