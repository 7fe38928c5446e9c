from django.apps import AppConfig


class BillingAppConfig(AppConfig):
    """Price catalog, spot price history, metering and budgets (filled in by the billing issue)."""

    name = "billing_app"
    verbose_name = "Billing"

    def ready(self) -> None:
        """Scheduling asks billing through the interface it defines (scheduler_app.rules.billing)."""
        from billing_app.scheduling import SchedulingBilling
        from scheduler_app.rules.billing import register_billing

        register_billing(SchedulingBilling())
