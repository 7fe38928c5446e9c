"""The SDK and the CLI on billing: a statement in Decimals, and switching a running request's billing."""

import datetime as dt
import json
from decimal import Decimal

import pytest
from gpu_portal_sdk import NotFoundError, ValidationError
from gpu_portal_sdk.cli import main

from billing_app.metering import meter_usage
from scheduler_app.models import GpuRequest
from tests.billing_app.conftest import T0, finish, price_history, start_running  # noqa: F401 (fixtures)

H = dt.timedelta(hours=1)


@pytest.fixture
def billed(pool, price_history, start_running):  # noqa: F811
    price_history(pool, (T0 - H, "3.00"))
    finish(start_running(milli=500), T0 + 2 * H)
    meter_usage(T0 + 10 * H)


def test_statement_in_decimals(connect, member, outsider, billed):
    statement = connect(member).statement("vision", month=f"{T0:%Y-%m}")

    assert (statement.total_usd, statement.gpu_hours) == (Decimal("3.00"), Decimal("1.000"))
    assert statement.by_user == {"bob": Decimal("3.00")}
    with pytest.raises(NotFoundError):
        connect(outsider).statement("vision")


def test_switch_billing_and_a_clear_refusal(connect, member, start_running):  # noqa: F811
    request = start_running(milli=250, at=dt.datetime.now(dt.UTC) - H)
    portal = connect(member)

    with pytest.raises(ValidationError, match="checkpoint"):
        portal.switch_billing(request.pk, "spot")
    assert portal.switch_billing(request.pk, "spot", checkpoint_interval_s=600) == "spot"
    assert GpuRequest.objects.get(pk=request.pk).billing_mode == "spot"


def test_cli_billing_and_statement(as_user, member, billed, start_running, capsys):  # noqa: F811
    request = start_running(milli=250, at=dt.datetime.now(dt.UTC) - H, name="later")
    as_user(member)

    assert main(["billing", str(request.pk), "spot", "--checkpoint-interval", "600"]) == 0
    assert "billed spot from now" in capsys.readouterr().out
    assert main(["statement", "vision", "--month", f"{T0:%Y-%m}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_usd"] == "3.00"
    assert main(["statement", "vision", "--month", "2026-13"]) == 5
