"""Scheduling asks billing only through scheduler_app.rules.billing, which billing_app fills in."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from billing_app.scheduling import SchedulingBilling
from scheduler_app.rules import billing as interface


def test_billing_registers_its_answers_when_its_app_is_ready():
    assert isinstance(interface.billing(), SchedulingBilling)


def test_scheduling_without_billing_registered_fails_loudly(monkeypatch):
    monkeypatch.setattr(interface, "_billing", None)

    with pytest.raises(ImproperlyConfigured, match=r"BillingAppConfig\.ready"):
        interface.billing()
