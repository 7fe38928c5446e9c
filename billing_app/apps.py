from django.apps import AppConfig


class BillingAppConfig(AppConfig):
    """Price catalog, spot price history, metering and budgets (filled in by the billing issue)."""

    name = "billing_app"
    verbose_name = "Billing"
