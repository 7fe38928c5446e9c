"""The job's private directories, and the agent's own reads and writes inside them.

The agent runs as root and a job's directories are the job's to fill: a job may leave a symlink
where the agent expects a file (`.stop_by -> /etc/passwd`). So every path the agent touches under a
job's directory is opened one component at a time without following links.
"""

import contextlib
import os
import stat
from pathlib import Path

PRIVATE = 0o700
PASS_THROUGH = 0o711  # others may pass through to their own directory, not list who else has one


def private_directory(path: Path, uid: int, gid: int) -> None:
    """`path` as the job's own directory, mode 0700, its parents root's and passable (0711). What an
    earlier run left there under another owner (another node's account, a changed mapping) becomes
    the job's too."""
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            os.chmod(parent, PASS_THROUGH)
        elif not parent.stat().st_mode & stat.S_IXOTH:
            raise OSError(f"the job cannot reach {path}: {parent} is closed to others (chmod o+x {parent})")
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    status = path.lstat()
    if not stat.S_ISDIR(status.st_mode):
        raise OSError(f"{path} is not a directory")
    if (status.st_uid, status.st_gid) != (uid, gid):
        chown_tree(path, uid, gid)
    os.chmod(path, PRIVATE, follow_symlinks=False)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give `path` and everything in it to uid:gid, walking by file descriptors: a link is changed
    itself, never followed, even if the tree changes during the walk."""
    os.chown(path, uid, gid, follow_symlinks=False)
    for _, dirs, files, fd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)


def write_file_in(directory: Path, name: str, text: str, uid: int | None = None) -> None:
    """Write `directory/name` without following a link planted there; owned by `uid` when given."""
    folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            if uid is not None:
                os.fchown(handle.fileno(), uid, -1)
    finally:
        os.close(folder)


def open_beneath(root: Path, relative: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor of `root/relative`, no component of `relative` followed if it is a link."""
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        *parents, name = relative.split("/")
        for part in parents:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        return os.open(name, flags | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    finally:
        os.close(folder)
