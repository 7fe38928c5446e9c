"""Whose Unix identity a job runs as: never the agent's.

By default each team gets a system user and group of its own, made on first use (no login shell, a
home of its own, mode 0700). An operator may map a team or a user to an existing account instead
(one from LDAP, say): in the portal (the work item's `unix_account`) or in the agent's identity map,
which wins, as the node's own word on its accounts.
"""

import hashlib
import logging
import os
import pwd
import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_-]*\$?")
MAX_ACCOUNT_CHARS = 32  # useradd's limit
NOLOGIN = "/usr/sbin/nologin"
USERADD_BUSY = 10  # useradd could not lock /etc/passwd: another useradd runs
_creating = threading.Lock()  # the demo's agents are threads of one process


class IdentityError(Exception):
    """The job cannot run as anyone allowed: the message says why, for the job's log."""


@dataclass(frozen=True)
class Identity:
    """A Unix account a job runs as: its name, uid, gid and home."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def of(cls, name: str) -> "Identity":
        entry = pwd.getpwnam(name)
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def team_account(prefix: str, team: str) -> str:
    """The default account of a team: `<prefix><slug>`, shortened with a digest past useradd's limit."""
    name = f"{prefix}{team}".lower()
    if len(name) > MAX_ACCOUNT_CHARS or not ACCOUNT_NAME.fullmatch(name):
        digest = hashlib.sha256(team.encode()).hexdigest()[:8]
        cleaned = re.sub(r"[^a-z0-9_-]", "-", team.lower())
        name = f"{prefix}{cleaned[: MAX_ACCOUNT_CHARS - len(prefix) - 9]}-{digest}"
    return name


class Identities:
    """Resolves a work item to the identity its job runs as, making a team's default account when it
    is first needed. `mapping`: the agent's own map, {"teams": {slug: account}, "users": {name: account}}."""

    def __init__(self, *, prefix: str = "gpp-", home_root: str = "/var/lib/gpu-portal/home", mapping=None):
        self.prefix = prefix
        self.home_root = Path(home_root)
        self.teams = dict((mapping or {}).get("teams", {}))
        self.users = dict((mapping or {}).get("users", {}))

    def for_work(self, work: dict) -> Identity:
        """The account named for the work's user or team (the agent's map first, then the portal's),
        else the team's own account, made now if the node has none yet."""
        named = (
            self.users.get(work.get("user", "")) or self.teams.get(work["team"]) or work.get("unix_account")
        )
        if named:
            return _existing(named)
        return self._team_identity(work["team"])

    def _team_identity(self, team: str) -> Identity:
        name = team_account(self.prefix, team)
        with _creating:
            try:
                identity = Identity.of(name)
            except KeyError:
                identity = self._create(name, team)
            if identity.uid == 0:
                raise IdentityError(f"the account {name} of team {team} is root: refusing to run its jobs")
            if Path(identity.home) != self.home_root / name or not Path(identity.home).is_dir():
                identity = self._rehome(identity)
        return identity

    def _rehome(self, identity: Identity) -> Identity:
        """A team account whose home is gone, or lies outside the home root (the node's --home-root
        changed), gets its home there again: every job has a HOME it can write."""
        home = self.home_root / identity.name
        _private_parent(self.home_root)
        done = subprocess.run(["usermod", "--home", str(home), identity.name], capture_output=True, text=True)
        if done.returncode != 0:
            raise IdentityError(f"could not give {identity.name} its home {home}: {done.stderr.strip()}")
        home.mkdir(exist_ok=True)
        os.chown(home, identity.uid, identity.gid)
        os.chmod(home, 0o700)
        return Identity.of(identity.name)

    def _create(self, name: str, team: str) -> Identity:
        home = self.home_root / name
        _private_parent(self.home_root)
        command = [
            "useradd", "--system", "--user-group", "--shell", NOLOGIN, "--home-dir", str(home),
            "--create-home", "--comment", f"GPU Portal team {team}", name,
        ]  # fmt: skip
        for _ in range(20):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != USERADD_BUSY:
                break
            time.sleep(0.1)
        if done.returncode != 0:
            raise IdentityError(f"could not create the account {name} for team {team}: {done.stderr.strip()}")
        identity = Identity.of(name)
        os.chmod(home, 0o700)
        log.info("created the account %s (uid %d) for team %s", name, identity.uid, team)
        return identity


def _existing(name: str) -> Identity:
    if not ACCOUNT_NAME.fullmatch(name) or len(name) > MAX_ACCOUNT_CHARS:
        raise IdentityError(f"{name!r} is not a valid Unix account name")
    try:
        identity = Identity.of(name)
    except KeyError:
        raise IdentityError(f"the Unix account {name} does not exist on this node") from None
    if identity.uid == 0 or identity.gid == 0:
        raise IdentityError(f"the Unix account {name} is root's: refusing to run a job as it")
    return identity


def _private_parent(path: Path) -> None:
    """A root-owned directory others may pass through but not list (0711)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o711)
