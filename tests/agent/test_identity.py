"""Whose identity a job runs as (agent.isolation.identity): real accounts, made with useradd, as root."""

import os
import pwd
import shutil
import stat
import subprocess
import uuid

import pytest

from agent.isolation.identity import ACCOUNT_NAME, MAX_ACCOUNT_CHARS, Identities, IdentityError, team_account


@pytest.fixture
def identities(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("accounts are made with useradd: run the agent's identity tests as root (CI does)")
    return Identities(prefix="gppu-", home_root=str(tmp_path / "home"))


@pytest.fixture
def team():
    """A fresh team slug; its account goes with the test."""
    slug = f"t{uuid.uuid4().hex[:8]}"
    yield slug
    subprocess.run(["userdel", f"gppu-{slug}"], capture_output=True)


def test_a_team_gets_its_own_system_account_once_with_no_shell_and_a_private_home(identities, team, tmp_path):

    first = identities.for_work({"team": team, "user": "bob", "unix_account": ""})
    again = identities.for_work({"team": team, "user": "carol", "unix_account": ""})

    entry = pwd.getpwnam(f"gppu-{team}")
    assert first == again and first.uid == entry.pw_uid != 0
    assert entry.pw_shell == "/usr/sbin/nologin"
    assert first.home == str(tmp_path / "home" / f"gppu-{team}")
    home = os.stat(first.home)
    assert (home.st_uid, stat.S_IMODE(home.st_mode)) == (first.uid, 0o700)


def test_a_team_account_whose_home_is_gone_gets_it_back(identities, team):
    made = identities.for_work({"team": team})
    shutil.rmtree(made.home)

    again = identities.for_work({"team": team})

    assert os.path.isdir(again.home) and os.stat(again.home).st_uid == made.uid


def test_the_agents_map_wins_then_the_portals_mapping_then_the_teams_own_account(tmp_path):
    mapped = Identities(prefix="gppu-", home_root=str(tmp_path), mapping={"users": {"bob": "nobody"}})

    assert mapped.for_work({"team": "vision", "user": "bob", "unix_account": "daemon"}).name == "nobody"
    assert mapped.for_work({"team": "vision", "user": "carol", "unix_account": "daemon"}).name == "daemon"


@pytest.mark.parametrize(
    ("account", "says"),
    [("root", "root's"), ("no-such-account-x", "does not exist on this node"), ("Bad Name", "not a valid")],
)
def test_root_unknown_and_malformed_accounts_are_refused_saying_why(tmp_path, account, says):
    with pytest.raises(IdentityError, match=says):
        Identities(home_root=str(tmp_path)).for_work({"team": "vision", "unix_account": account})


def test_a_long_or_odd_team_slug_still_makes_a_valid_account_name():
    names = {team_account("gpp-", slug) for slug in ("a" * 100, "a" * 99 + "b", "Vision-Team_2")}

    assert len(names) == 3
    assert all(len(name) <= MAX_ACCOUNT_CHARS and ACCOUNT_NAME.fullmatch(name) for name in names)
