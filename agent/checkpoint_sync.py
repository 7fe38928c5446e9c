"""Checkpoint data another node can read: a job's checkpoint directory copied to a shared path or to
object storage (S3 or anything speaking its API), and optionally to a second location (the
cross-zone backup).

Each push is a snapshot under `KEY/SNAPSHOT/`: the files first, then `MANIFEST.json` with the
checkpoint time and each file's SHA-256. A copy without its manifest (the node died mid-upload) is
never taken as complete, and a pull checks every digest before it hands the files over.

The agent runs as root and a checkpoint directory is its job's to fill: a push reads only the regular
files in it and a pull writes only beneath it, each path opened one component at a time without
following links (agent.isolation.files), so a link the job left there leads nowhere else.

store_from_url("file:///shared/checkpoints") or store_from_url("s3://bucket/prefix", endpoint_url=...)
"""

import datetime as dt
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gpu_portal_sdk.checkpoint import CHECKPOINTED_FILE

from agent.isolation.files import open_beneath

log = logging.getLogger(__name__)

MANIFEST = "MANIFEST.json"
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
# The checkpoint time, then the push's (ns, hex) for two pushes of one checkpoint, then a random tag.
SNAPSHOT_PATTERN = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{16}-[0-9a-f]{4}")
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
CHUNK = 1024 * 1024


class StoreUnavailable(Exception):
    """The store cannot be reached or used (an unmounted share, a missing bucket, a network error)."""


class CheckpointSyncError(Exception):
    """A push wrote no complete copy anywhere, or the directory changed while it was read."""


@dataclass(frozen=True)
class CheckpointCopy:
    """One complete snapshot in one store. `files` maps each relative path to its SHA-256 and size;
    `url` is the reference the portal carries to the node that resumes the work."""

    key: str
    snapshot: str
    checkpointed_at: dt.datetime
    files: dict
    url: str


class FilesystemStore:
    """A directory on storage every node mounts. Each object is written to a temporary name and
    renamed, so a reader never sees half a file."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = self.root.as_uri()

    def _existing_root(self) -> Path:
        if not self.root.is_dir():
            raise StoreUnavailable(f"{self.root} is not a directory (is the share mounted?)")
        return self.root

    def upload(self, source, name: str) -> None:
        """Store the binary file object `source` as `name`."""
        self._write(name, lambda partial: _copy_into(source, partial))

    def put_bytes(self, name: str, data: bytes) -> None:
        self._write(name, lambda partial: partial.write_bytes(data))

    def _write(self, name: str, write) -> None:
        target = self._existing_root() / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
            write(partial)
            os.replace(partial, target)
        except OSError as error:
            raise StoreUnavailable(f"writing {target}: {error}") from error

    def download(self, name: str, target: Path) -> None:
        try:
            shutil.copyfile(self._existing_root() / name, target)
        except FileNotFoundError as error:
            raise KeyError(name) from error
        except OSError as error:
            raise StoreUnavailable(f"reading {self.root / name}: {error}") from error

    def get_bytes(self, name: str) -> bytes:
        try:
            return (self._existing_root() / name).read_bytes()
        except FileNotFoundError as error:
            raise KeyError(name) from error
        except OSError as error:
            raise StoreUnavailable(f"reading {self.root / name}: {error}") from error

    def names(self, prefix: str) -> list[str]:
        """Every object under `prefix/` (recursively), as names relative to the store."""
        base = self._existing_root() / prefix
        try:
            return sorted(
                path.relative_to(self.root).as_posix()
                for path in base.rglob("*")
                if path.is_file() and not path.name.endswith(".partial")
            )
        except OSError as error:
            raise StoreUnavailable(f"listing {base}: {error}") from error

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._existing_root() / prefix, ignore_errors=True)


class S3Store:
    """A bucket and prefix in S3 or an S3-compatible service (`endpoint_url`). Credentials come from
    the usual AWS chain (environment, profile, instance role) unless given."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        region_name: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        timeout_s: float = 10.0,
    ):
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region_name,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            config=Config(
                connect_timeout=timeout_s,
                read_timeout=timeout_s,
                retries={"max_attempts": 2, "mode": "standard"},
            ),
        )

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _call(self, what: str, call, *args, **kwargs):
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(*args, **kwargs)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise KeyError(what) from error
            raise StoreUnavailable(f"{self.url}: {what}: {code}: {error}") from error
        except (BotoCoreError, Boto3Error) as error:  # Boto3Error: upload_file's S3UploadFailedError
            raise StoreUnavailable(f"{self.url}: {what}: {error}") from error

    def upload(self, source, name: str) -> None:
        """Store the binary file object `source` as `name`."""
        self._call(name, self.client.upload_fileobj, source, self.bucket, self._key(name))

    def put_bytes(self, name: str, data: bytes) -> None:
        self._call(name, self.client.put_object, Bucket=self.bucket, Key=self._key(name), Body=data)

    def download(self, name: str, target: Path) -> None:
        self._call(name, self.client.download_file, self.bucket, self._key(name), str(target))

    def get_bytes(self, name: str) -> bytes:
        answer = self._call(name, self.client.get_object, Bucket=self.bucket, Key=self._key(name))
        return answer["Body"].read()

    def names(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix.rstrip("/") + "/")
        )
        keys = [item["Key"] for page in self._call(prefix, list, pages) for item in page.get("Contents", [])]
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted(key[strip:] for key in keys)

    def delete_prefix(self, prefix: str) -> None:
        names = self.names(prefix)
        for start in range(0, len(names), 1000):  # the most one DeleteObjects takes
            batch = [{"Key": self._key(name)} for name in names[start : start + 1000]]
            self._call(prefix, self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch})


def store_from_url(url: str, **options):
    """`file:///absolute/path` or `s3://bucket/prefix`; `options` go to S3Store (endpoint_url, ...)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"{url!r}: a file URL names an absolute path, e.g. file:///shared/checkpoints")
        if options:
            raise ValueError(f"{url!r}: a file store takes no options (got {', '.join(sorted(options))})")
        return FilesystemStore(parts.path)
    if parts.scheme == "s3":
        if not BUCKET_PATTERN.fullmatch(parts.netloc or ""):
            raise ValueError(
                f"{url!r}: name a bucket of 3 to 63 lowercase letters, digits, dots and hyphens, "
                "e.g. s3://checkpoints/portal"
            )
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: give options such as the endpoint URL separately, not in the URL")
        return S3Store(parts.netloc, parts.path, **options)
    raise ValueError(f"{url!r}: a checkpoint store URL is file:///path or s3://bucket/prefix")


class CheckpointSync:
    """Pushes a job's checkpoint directory to the primary store (and the backup, when configured) and
    pulls the newest complete copy back, from the backup when the primary lacks it or is down.
    `keep` complete snapshots stay in each store; older ones are removed after a push."""

    def __init__(self, primary, backup=None, *, keep: int = 2):
        self.stores = [primary] + ([backup] if backup is not None else [])
        self.keep = keep

    def push(self, local_dir: str | os.PathLike, key: str, checkpointed_at: dt.datetime | None = None):
        """Upload `local_dir` as one snapshot to every store; the copy in the first store written.
        The checkpoint time is when the job last touched `.checkpointed` (else now)."""
        _check_key(key)
        local = Path(local_dir)
        files = _digests(local)
        when = checkpointed_at or _checkpoint_time(local)
        snapshot = f"{when:%Y%m%dT%H%M%S.%fZ}-{time.time_ns():016x}-{secrets.token_hex(2)}"
        manifest = {
            "key": key,
            "snapshot": snapshot,
            "checkpointed_at": when.isoformat(),
            "files": {path: {"sha256": digest, "size": size} for path, (digest, size, _) in files.items()},
        }
        copies = []
        for store in self.stores:
            try:
                for path in files:
                    with os.fdopen(open_beneath(local, path), "rb") as source:
                        store.upload(source, f"{key}/{snapshot}/files/{path}")
                if _digests(local) != files:
                    raise CheckpointSyncError(f"{local} changed while it was copied: push again")
                store.put_bytes(f"{key}/{snapshot}/{MANIFEST}", json.dumps(manifest, indent=1).encode())
            except StoreUnavailable as error:
                log.warning("checkpoint %s not copied to %s: %s", key, store.url, error)
                continue
            copies.append(_copy(manifest, store))
            try:
                self._prune(store, key)
            except StoreUnavailable as error:  # the copy stands; older ones go after the next push
                log.warning("checkpoint %s: old copies in %s not removed: %s", key, store.url, error)
        if not copies:
            raise CheckpointSyncError(f"checkpoint {key} was copied nowhere: every store failed")
        return copies[0]

    def pull(self, key: str, local_dir: str | os.PathLike):
        """The newest complete copy, its files checked and placed in `local_dir`; None if no store
        has one."""
        _check_key(key)
        local = Path(local_dir)
        for store in self.stores:
            try:
                for manifest in _complete_manifests(store, key):
                    if _fetch(store, manifest, local):
                        return _copy(manifest, store)
            except StoreUnavailable as error:
                log.warning(
                    "checkpoint %s: %s is unavailable (%s); trying the next store", key, store.url, error
                )
        return None

    def latest(self, key: str):
        """The newest complete copy's description, without fetching its files."""
        _check_key(key)
        for store in self.stores:
            try:
                newest = next(iter(_complete_manifests(store, key)), None)
            except StoreUnavailable as error:
                log.warning(
                    "checkpoint %s: %s is unavailable (%s); trying the next store", key, store.url, error
                )
                continue
            if newest is not None:
                return _copy(newest, store)
        return None

    def _prune(self, store, key: str) -> None:
        """Drop snapshots older than the `keep` newest complete ones, torn ones included."""
        complete = [manifest["snapshot"] for manifest in _complete_manifests(store, key)]
        if len(complete) < self.keep:
            return
        oldest_kept = complete[self.keep - 1]
        for snapshot in _snapshots(store, key):
            if snapshot < oldest_kept:
                store.delete_prefix(f"{key}/{snapshot}")


def _check_key(key: str) -> None:
    if not KEY_PATTERN.fullmatch(key) or ".." in key.split("/"):
        raise ValueError(f"checkpoint key {key!r}: use letters, digits, '.', '_', '-' and '/' separators")


def _digests(local: Path) -> dict[str, tuple[str, int, int]]:
    """Each regular file's SHA-256, size and modification time (ns), by path relative to `local`; links
    and special files are not part of a checkpoint."""
    if not local.is_dir() or local.is_symlink():
        raise CheckpointSyncError(f"{local} is not a directory")
    files = {}
    for folder, _, names, fd in os.fwalk(local, follow_symlinks=False):
        for name in names:
            status = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(status.st_mode):
                continue
            path = Path(folder, name).relative_to(local).as_posix()
            with os.fdopen(open_beneath(local, path), "rb") as source:
                files[path] = (_sha256(source), status.st_size, status.st_mtime_ns)
    return dict(sorted(files.items()))


def _checkpoint_time(local: Path) -> dt.datetime:
    try:
        return dt.datetime.fromtimestamp((local / CHECKPOINTED_FILE).lstat().st_mtime, dt.UTC)
    except FileNotFoundError:
        return dt.datetime.now(dt.UTC)


def _snapshots(store, key: str) -> list[str]:
    """Snapshot ids under `key`, newest first (ids start with the checkpoint time); the objects of
    a longer key (`key/more`) are not snapshots of this one."""
    ids = {name[len(key) + 1 :].split("/", 1)[0] for name in store.names(key)}
    return sorted((id_ for id_ in ids if SNAPSHOT_PATTERN.fullmatch(id_)), reverse=True)


def _complete_manifests(store, key: str):
    """The manifests of complete snapshots, newest first; an unreadable manifest is skipped."""
    for snapshot in _snapshots(store, key):
        try:
            manifest = json.loads(store.get_bytes(f"{key}/{snapshot}/{MANIFEST}"))
        except KeyError:
            continue  # torn: its upload never finished
        except ValueError:
            log.warning("checkpoint %s/%s in %s: unreadable manifest, skipped", key, snapshot, store.url)
            continue
        yield manifest


def _fetch(store, manifest: dict, local: Path) -> bool:
    """Download a snapshot into a private folder in `local`, check every digest, then move the files
    in, owned as `local` is. False (and `local` untouched) when a file is missing or differs."""
    local.mkdir(parents=True, exist_ok=True)
    prefix = f"{manifest['key']}/{manifest['snapshot']}/files"
    paths = [path for path in manifest["files"] if _plain_path(path)]
    if len(paths) != len(manifest["files"]):
        log.warning(
            "checkpoint %s in %s names paths outside its folder: skipped", manifest["snapshot"], store.url
        )
        return False
    with tempfile.TemporaryDirectory(dir=local, prefix=".pull-") as staging:  # root's, 0700
        staged = Path(staging)
        for path in paths:
            target = staged / path
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                store.download(f"{prefix}/{path}", target)
            except KeyError:
                log.warning("checkpoint %s in %s lacks %s: skipped", manifest["snapshot"], store.url, path)
                return False
            with target.open("rb") as source:
                if _sha256(source) != manifest["files"][path]["sha256"]:
                    log.warning(
                        "checkpoint %s in %s: %s is corrupt: skipped", manifest["snapshot"], store.url, path
                    )
                    return False
        owner = local.lstat()
        for path in paths:
            _place(staged / path, local, path, owner.st_uid, owner.st_gid)
    if CHECKPOINTED_FILE in manifest["files"]:
        # The marker's time is the job's last checkpoint, not when this copy arrived.
        moment = dt.datetime.fromisoformat(manifest["checkpointed_at"]).timestamp()
        os.utime(local / CHECKPOINTED_FILE, (moment, moment), follow_symlinks=False)
    return True


def _plain_path(path: str) -> bool:
    """A relative path of plain components: nothing absolute, no `..`, nothing empty."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(part not in ("", ".", "..") for part in parts)


def _place(source: Path, local: Path, path: str, uid: int, gid: int) -> None:
    """Move `source` to `local/path`, its folders made (owned by uid:gid) and entered one at a time
    without following links; a link in the way is replaced, never followed."""
    folder = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        *parents, name = path.split("/")
        for part in parents:
            try:
                os.mkdir(part, 0o700, dir_fd=folder)
                os.chown(part, uid, gid, dir_fd=folder, follow_symlinks=False)
            except FileExistsError:
                pass
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = inner
        os.replace(source, name, dst_dir_fd=folder)
        os.chown(name, uid, gid, dir_fd=folder, follow_symlinks=False)
    finally:
        os.close(folder)


def _copy_into(source, target: Path) -> None:
    with target.open("wb") as copy:
        shutil.copyfileobj(source, copy, CHUNK)


def _sha256(source) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _copy(manifest: dict, store) -> CheckpointCopy:
    return CheckpointCopy(
        key=manifest["key"],
        snapshot=manifest["snapshot"],
        checkpointed_at=dt.datetime.fromisoformat(manifest["checkpointed_at"]),
        files=manifest["files"],
        url=f"{store.url}/{manifest['key']}/{manifest['snapshot']}",
    )
