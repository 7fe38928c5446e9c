"""ResourceManager() with no arguments: the environment first, then the file `gpu-portal login` writes;
and `gpu-portal login` / `logout` writing and removing that file. Against the live portal."""

import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from gpu_portal_sdk import ConfigurationError, ResourceManager
from gpu_portal_sdk.cli import AUTH, OK, main
from gpu_portal_sdk.config import read_config, write_config

from scheduler_app.services.requests import submit_request

SDK = Path(__file__).resolve().parents[2] / "sdk"

pytestmark = pytest.mark.django_db(transaction=True)  # the live server reads what the test writes


@pytest.fixture
def mine(member, team, cluster):
    return submit_request(user=member, team=team, name="mine", task_type="training", gpu_milli=250)


def test_no_arguments_reads_the_environment(live_server, token, member, mine, monkeypatch):
    monkeypatch.setenv("GPU_PORTAL_URL", live_server.url + "/")
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(member))

    portal = ResourceManager()

    assert portal.api_url == f"{live_server.url}/api/v1/"
    assert [r.name for r in portal.list()] == ["mine"]


def test_no_arguments_reads_the_saved_login(live_server, token, member, mine, no_saved_login):
    write_config(no_saved_login, live_server.url, token(member))

    assert [r.name for r in ResourceManager().list()] == ["mine"]


def test_the_environment_overrides_the_saved_login(
    live_server, token, member, outsider, mine, no_saved_login, monkeypatch
):
    write_config(no_saved_login, live_server.url, token(member))
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(outsider))

    assert ResourceManager().list() == []  # the outsider's view: the env token won


def test_explicit_arguments_override_both(
    live_server, token, member, outsider, mine, no_saved_login, monkeypatch
):
    write_config(no_saved_login, "http://127.0.0.1:9", token(outsider))
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(outsider))

    assert [r.name for r in ResourceManager(live_server.url, token(member)).list()] == ["mine"]


def test_nothing_configured_names_what_is_missing_and_where_it_looked(no_saved_login, monkeypatch):
    with pytest.raises(ConfigurationError) as no_url:
        ResourceManager()
    monkeypatch.setenv("GPU_PORTAL_URL", "https://gpu.example.org")
    with pytest.raises(ConfigurationError) as no_token:
        ResourceManager()

    assert "No portal address" in no_url.value.message and "GPU_PORTAL_URL" in no_url.value.message
    assert str(no_saved_login) in no_url.value.message
    assert no_token.value.message.startswith("No API token for https://gpu.example.org: ")
    assert "GPU_PORTAL_TOKEN" in no_token.value.message
    assert "https://gpu.example.org/accounts/tokens/" in no_token.value.message
    assert no_url.value.code == "not_configured"


def test_the_saved_token_is_never_sent_to_another_portal(no_saved_login, monkeypatch):
    write_config(no_saved_login, "https://gpu.example.org/", "gpp_saved")
    monkeypatch.setenv("GPU_PORTAL_URL", "https://elsewhere.example.org")

    with pytest.raises(ConfigurationError) as raised:
        ResourceManager()

    assert "the token in" in raised.value.message and "is for https://gpu.example.org" in raised.value.message
    # The same portal written another way still gets it.
    monkeypatch.setenv("GPU_PORTAL_URL", "https://gpu.example.org/api/v1")
    assert ResourceManager().session.headers["Authorization"] == "Bearer gpp_saved"


def test_an_unreadable_config_file_is_named(no_saved_login):
    no_saved_login.parent.mkdir(parents=True)
    no_saved_login.write_text("url = [not toml")

    with pytest.raises(ConfigurationError) as raised:
        ResourceManager()

    assert str(no_saved_login) in raised.value.message


def test_the_file_is_owner_only_and_keeps_awkward_characters(no_saved_login):
    no_saved_login.parent.mkdir(parents=True)
    no_saved_login.write_text("old")
    no_saved_login.chmod(0o644)

    write_config(no_saved_login, "https://gpu.example.org/", 'gpp_"quoted"\\back\tslash')

    assert stat.S_IMODE(no_saved_login.stat().st_mode) == 0o600
    assert read_config(no_saved_login) == {
        "url": "https://gpu.example.org",
        "token": 'gpp_"quoted"\\back\tslash',
    }
    assert list(no_saved_login.parent.iterdir()) == [no_saved_login]  # no scratch file left behind


# gpu-portal login / logout


def test_login_checks_the_token_saves_it_0600_and_commands_need_nothing_else(
    live_server, token, member, mine, no_saved_login, capsys
):
    assert main(["login", "--url", live_server.url, "--token", token(member)]) == OK

    out = capsys.readouterr().out
    assert f"Logged in to {live_server.url}; your teams: vision (member)." in out
    assert stat.S_IMODE(no_saved_login.stat().st_mode) == 0o600
    assert stat.S_IMODE(no_saved_login.parent.stat().st_mode) == 0o700
    saved = tomllib.loads(no_saved_login.read_text())
    assert saved["url"] == live_server.url and saved["token"].startswith("gpp_")

    assert main(["list", "--json"]) == OK
    assert '"name": "mine"' in capsys.readouterr().out


def test_a_refused_token_saves_nothing(live_server, transactional_db, no_saved_login, capsys):
    assert main(["login", "--url", live_server.url, "--token", "gpp_wrong"]) == AUTH

    assert "gpu-portal:" in capsys.readouterr().err
    assert not no_saved_login.exists()


def test_login_reads_the_token_from_stdin(live_server, token, member, no_saved_login):
    done = subprocess.run(
        [sys.executable, "-m", "gpu_portal_sdk", "login", "--url", live_server.url],
        input=token(member) + "\n",
        env=_env(GPU_PORTAL_CONFIG=str(no_saved_login)),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert read_config(no_saved_login)["url"] == live_server.url


def test_login_at_a_terminal_asks_the_address_and_the_token_unechoed(
    live_server, token, member, no_saved_login, monkeypatch
):
    secret = token(member)
    asked = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or live_server.url)
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or f" {secret} ")

    assert main(["login"]) == OK

    assert asked == [
        "Portal address (e.g. https://gpu.example.org): ",
        f"API token (create one at {live_server.url}/accounts/tokens/): ",
    ]
    assert read_config(no_saved_login) == {"url": live_server.url, "token": secret}


def test_env_set_at_login_is_said_to_take_precedence(
    live_server, token, member, outsider, mine, monkeypatch, capsys
):
    monkeypatch.setenv("GPU_PORTAL_TOKEN", token(outsider))

    assert main(["login", "--url", live_server.url, "--token", token(member)]) == OK
    assert "GPU_PORTAL_TOKEN set in this shell take precedence" in capsys.readouterr().out

    assert main(["list", "--json"]) == OK
    assert capsys.readouterr().out.strip() == "[]"  # the outsider's token, from the environment


def test_logout_removes_the_file(no_saved_login, capsys):
    write_config(no_saved_login, "https://gpu.example.org", "gpp_saved")

    assert main(["logout"]) == OK
    removed = capsys.readouterr().out
    assert main(["logout"]) == OK
    again = capsys.readouterr().out

    assert removed.startswith(f"Removed {no_saved_login}. The token itself stays valid")
    assert again == f"Not logged in: there is no {no_saved_login}.\n"
    assert not no_saved_login.exists()


def _env(**extra) -> dict:
    """A minimal environment for a subprocess: the interpreter's path and this worktree's SDK."""
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SDK), "HOME": "/nonexistent", **extra}
