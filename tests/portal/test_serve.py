"""The run command's server, for real: migrate, seed and serve over Daphne, then fetch pages."""

import urllib.request

import pytest

from tests.embedded import embedded_portal as serve


@pytest.fixture
def embedded_portal(tmp_path):
    with serve(tmp_path) as base:
        yield base


def test_run_command_serves_login_page_and_admin(embedded_portal):
    login = urllib.request.urlopen(f"{embedded_portal}/accounts/login/", timeout=5)
    admin = urllib.request.urlopen(f"{embedded_portal}/admin/login/", timeout=5)
    css = urllib.request.urlopen(f"{embedded_portal}/static/css/portal.css", timeout=5)

    assert login.status == 200 and b"Log in" in login.read()
    assert admin.status == 200 and b"Django administration" in admin.read()
    assert css.status == 200
