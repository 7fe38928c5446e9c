"""Configuration comes from the environment and bad values stop the start with the variable's name."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from infra.env import env_bool, env_int, env_list, env_secret

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, **env):
    clean = {
        k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY"}
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DEBUG": "0"}, "SECRET_KEY (or SECRET_KEY_FILE) is required"),
        ({"DEBUG": "0", "SECRET_KEY": "x" * 60}, "ALLOWED_HOSTS is required"),
        ({"DATABASE_URL": "mysqlish:/nowhere"}, "DATABASE_URL is not a database URL"),
        (
            {"REDIS_URL": "http://127.0.0.1:6379"},
            "REDIS_URL='http://127.0.0.1:6379' must start with redis://",
        ),
        ({"SECRET_KEY_FILE": "/nonexistent/secret"}, "SECRET_KEY_FILE='/nonexistent/secret' cannot be read"),
        ({"SECURE_HSTS_SECONDS": "soon"}, "SECURE_HSTS_SECONDS='soon' is not an integer"),
        ({"TEAM_SECRETS_KEYS": "not-a-fernet-key"}, "Key 1 of 1 in TEAM_SECRETS_KEYS is not a Fernet key"),
        ({"NODE_RETURN_TO_SERVICE": "sometimes"}, "NODE_RETURN_TO_SERVICE='sometimes' is not a boolean"),
    ],
)
def test_bad_setting_fails_at_start_naming_the_variable(env, named):
    result = manage("check", **env)
    assert result.returncode != 0
    assert named in result.stderr


def test_production_settings_pass_the_deploy_check(tmp_path):
    secret_file = tmp_path / "secret"
    secret_file.write_text(secrets.token_urlsafe(64))

    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="0",
        SECRET_KEY_FILE=str(secret_file),
        ALLOWED_HOSTS="portal.example.com",
    )

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_env_readers(monkeypatch, tmp_path):
    monkeypatch.setenv("FLAG", "yes")
    monkeypatch.setenv("COUNT", "5")
    monkeypatch.setenv("HOSTS", "a.example, b.example")
    assert env_bool("FLAG", False) is True
    assert env_bool("UNSET_FLAG", False) is False
    assert env_int("COUNT", 1) == 5
    assert env_list("HOSTS", []) == ["a.example", "b.example"]
    with pytest.raises(ImproperlyConfigured, match="COUNT=5 is below its minimum of 10"):
        env_int("COUNT", 1, minimum=10)
    monkeypatch.setenv("HOSTS", " , ")
    with pytest.raises(ImproperlyConfigured, match="HOSTS is set but names nothing"):
        env_list("HOSTS", [])


def test_secret_from_file_or_variable_but_not_both(monkeypatch, tmp_path):
    path = tmp_path / "token"
    path.write_text("from-file\n")
    monkeypatch.setenv("API_SECRET_FILE", str(path))
    assert env_secret("API_SECRET") == "from-file"
    monkeypatch.setenv("API_SECRET", "from-env")
    with pytest.raises(ImproperlyConfigured, match="either API_SECRET or API_SECRET_FILE"):
        env_secret("API_SECRET")


def test_a_postgresql_urls_options_are_kept_beside_the_connection_pool():
    code = (
        "from django.conf import settings; o = settings.DATABASES['default']['OPTIONS'];"
        " print(o['application_name'], o['sslmode'], o['pool']['max_size'])"
    )
    done = manage(
        "shell",
        "-c",
        code,
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/x?application_name=web-1&sslmode=prefer",
        DATABASE_POOL_MAX_SIZE="5",
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == ["web-1", "prefer", "5"]
