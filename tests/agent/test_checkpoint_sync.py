"""Checkpoint copies another node can read: against a shared directory and against moto's S3 server
started in this process."""

import datetime as dt
import json
import logging
import os
import socket
import time
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from agent.checkpoint_sync import (
    CheckpointSync,
    CheckpointSyncError,
    FilesystemStore,
    S3Store,
    store_from_url,
)

CREDENTIALS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_store(s3_endpoint, request):
    """A fresh bucket per test."""
    bucket = f"ckpt-{abs(hash(request.node.name)) % 10**10}"
    store = S3Store(bucket, "portal/zone-a", endpoint_url=s3_endpoint, **CREDENTIALS)
    store.client.create_bucket(Bucket=bucket)
    return store


@pytest.fixture
def fs_store(tmp_path):
    (tmp_path / "share").mkdir()
    return FilesystemStore(tmp_path / "share")


@pytest.fixture(params=["filesystem", "s3"])
def store(request):
    return request.getfixturevalue("fs_store" if request.param == "filesystem" else "s3_store")


def write_checkpoint(directory: Path, step: int, checkpointed_at: dt.datetime | None = None) -> Path:
    (directory / "shards").mkdir(parents=True, exist_ok=True)
    (directory / "model.pt").write_bytes(bytes([step % 256]) * 1000)
    (directory / "shards" / "optimizer.bin").write_text(f"optimizer state at step {step}")
    marker = directory / ".checkpointed"
    marker.touch()
    if checkpointed_at:
        os.utime(marker, (checkpointed_at.timestamp(), checkpointed_at.timestamp()))
    return directory


def contents(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


T1 = dt.datetime(2026, 12, 1, 6, 0, tzinfo=dt.UTC)
T2 = T1 + dt.timedelta(minutes=10)


def test_a_pushed_checkpoint_is_pulled_back_whole_on_another_node(store, tmp_path):
    job_dir = write_checkpoint(tmp_path / "node-a", step=7, checkpointed_at=T1)
    sync = CheckpointSync(store)

    pushed = sync.push(job_dir, "team-a/request-42")
    pulled = sync.pull("team-a/request-42", tmp_path / "node-b")

    assert pulled == pushed
    assert pulled.checkpointed_at == T1  # when the job touched .checkpointed
    assert contents(tmp_path / "node-b") == contents(job_dir)
    assert (tmp_path / "node-b" / ".checkpointed").stat().st_mtime == T1.timestamp()  # not the pull's time
    assert pulled.url == f"{store.url}/team-a/request-42/{pushed.snapshot}"
    assert set(pulled.files) == {".checkpointed", "model.pt", "shards/optimizer.bin"}


def test_a_second_push_of_the_same_checkpoint_time_is_the_newer_copy(fs_store, tmp_path):
    sync = CheckpointSync(fs_store, keep=5)
    for step in range(5):
        last = sync.push(write_checkpoint(tmp_path / "job", step=step, checkpointed_at=T1), "r")

    assert sync.latest("r") == last


def test_the_newest_complete_copy_wins(store, tmp_path):
    sync = CheckpointSync(store)
    sync.push(write_checkpoint(tmp_path / "job", step=1, checkpointed_at=T1), "request-1")
    newer = sync.push(write_checkpoint(tmp_path / "job", step=2, checkpointed_at=T2), "request-1")

    assert sync.latest("request-1") == newer
    sync.pull("request-1", tmp_path / "resumed")
    assert (tmp_path / "resumed" / "model.pt").read_bytes() == bytes([2]) * 1000


def test_a_torn_upload_without_its_manifest_is_ignored(store, tmp_path):
    sync = CheckpointSync(store)
    complete = sync.push(write_checkpoint(tmp_path / "job", step=1, checkpointed_at=T1), "request-1")
    # The node died after uploading a newer snapshot's files, before its manifest.
    torn = f"request-1/{T2:%Y%m%dT%H%M%S.%fZ}-{time.time_ns():016x}-dead/files"
    store.put_bytes(f"{torn}/model.pt", b"half a checkpoint")

    assert sync.latest("request-1") == complete
    assert sync.pull("request-1", tmp_path / "resumed") == complete
    assert (tmp_path / "resumed" / "model.pt").read_bytes() == bytes([1]) * 1000


def test_a_corrupt_copy_is_skipped_for_the_previous_one(fs_store, tmp_path):
    sync = CheckpointSync(fs_store)
    older = sync.push(write_checkpoint(tmp_path / "job", step=1, checkpointed_at=T1), "request-1")
    newer = sync.push(write_checkpoint(tmp_path / "job", step=2, checkpointed_at=T2), "request-1")
    (fs_store.root / "request-1" / newer.snapshot / "files" / "model.pt").write_bytes(b"bit rot")

    assert sync.pull("request-1", tmp_path / "resumed") == older
    assert (tmp_path / "resumed" / "model.pt").read_bytes() == bytes([1]) * 1000


def test_both_locations_are_written_when_a_backup_is_configured(fs_store, s3_store, tmp_path):
    sync = CheckpointSync(fs_store, backup=s3_store)

    pushed = sync.push(write_checkpoint(tmp_path / "job", step=3, checkpointed_at=T1), "request-9")

    from_primary = CheckpointSync(fs_store).latest("request-9")
    from_backup = CheckpointSync(s3_store).latest("request-9")
    assert pushed == from_primary
    assert from_backup.snapshot == pushed.snapshot and from_backup.files == pushed.files
    assert from_backup.url.startswith("s3://")


def test_the_backup_serves_the_pull_when_the_primary_is_down(s3_store, tmp_path, caplog):
    share = tmp_path / "share"
    share.mkdir()
    primary = FilesystemStore(share)
    sync = CheckpointSync(primary, backup=s3_store)
    sync.push(write_checkpoint(tmp_path / "job", step=5, checkpointed_at=T1), "request-3")
    share.rename(tmp_path / "unmounted")  # the share is gone

    with caplog.at_level(logging.WARNING, logger="agent.checkpoint_sync"):
        pulled = sync.pull("request-3", tmp_path / "resumed")

    assert pulled is not None and pulled.url.startswith(s3_store.url)
    assert contents(tmp_path / "resumed") == contents(tmp_path / "job")
    assert "is not a directory (is the share mounted?)" in caplog.text


def test_the_backup_serves_the_pull_when_the_primary_lacks_the_copy(fs_store, s3_store, tmp_path):
    CheckpointSync(s3_store).push(write_checkpoint(tmp_path / "job", step=5, checkpointed_at=T1), "request-3")

    pulled = CheckpointSync(fs_store, backup=s3_store).pull("request-3", tmp_path / "resumed")

    assert pulled is not None and pulled.url.startswith("s3://")


def test_a_push_with_the_primary_down_still_lands_in_the_backup(fs_store, s3_endpoint, tmp_path, caplog):
    missing_bucket = S3Store("no-such-bucket", "x", endpoint_url=s3_endpoint, **CREDENTIALS)
    sync = CheckpointSync(missing_bucket, backup=fs_store)

    with caplog.at_level(logging.WARNING, logger="agent.checkpoint_sync"):
        pushed = sync.push(write_checkpoint(tmp_path / "job", step=1), "request-5")

    assert pushed.url.startswith(fs_store.url)
    assert "not copied to s3://no-such-bucket/x" in caplog.text


def test_a_push_that_reaches_no_store_fails(tmp_path):
    sync = CheckpointSync(FilesystemStore(tmp_path / "absent"), backup=FilesystemStore(tmp_path / "gone"))

    with pytest.raises(CheckpointSyncError, match="copied nowhere"):
        sync.push(write_checkpoint(tmp_path / "job", step=1), "request-5")


def test_nothing_to_pull_is_none(store, tmp_path):
    assert CheckpointSync(store).pull("request-404", tmp_path / "resumed") is None
    assert CheckpointSync(store).latest("request-404") is None


def test_a_directory_changing_during_the_push_leaves_no_complete_copy(fs_store, tmp_path):
    job_dir = write_checkpoint(tmp_path / "job", step=1)

    class Racing(FilesystemStore):
        def upload(self, source, name):
            super().upload(source, name)
            (job_dir / "model.pt").write_bytes(b"the job is still writing")

    racing = Racing(fs_store.root)

    with pytest.raises(CheckpointSyncError, match="changed while it was copied"):
        CheckpointSync(racing).push(job_dir, "request-1")

    assert CheckpointSync(fs_store).latest("request-1") is None


def test_only_the_newest_copies_are_kept(fs_store, tmp_path):
    sync = CheckpointSync(fs_store, keep=2)
    snapshots = [
        sync.push(write_checkpoint(tmp_path / "job", step, T1 + dt.timedelta(minutes=step)), "r").snapshot
        for step in range(4)
    ]

    assert sorted(p.name for p in (fs_store.root / "r").iterdir()) == snapshots[2:]


def test_the_manifest_records_time_and_digests(fs_store, tmp_path):
    pushed = CheckpointSync(fs_store).push(write_checkpoint(tmp_path / "job", 1, T1), "r")

    manifest = json.loads((fs_store.root / "r" / pushed.snapshot / "MANIFEST.json").read_text())

    assert manifest["checkpointed_at"] == "2026-12-01T06:00:00+00:00"
    assert manifest["files"]["model.pt"] == {
        "sha256": "353c38352a855c80f4ecb0793a76493228541b5fab5ef7af26effac91e77ec46",
        "size": 1000,
    }


def test_store_urls_make_their_stores(tmp_path, s3_endpoint):
    fs = store_from_url(f"file://{tmp_path}")
    s3 = store_from_url("s3://ckpt-bucket/portal/zone-b/", endpoint_url=s3_endpoint, **CREDENTIALS)

    assert isinstance(fs, FilesystemStore) and fs.root == tmp_path
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("ckpt-bucket", "portal/zone-b")


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("file://shared/checkpoints", {}, "a file URL names an absolute path"),
        ("file:///shared", {"endpoint_url": "http://x"}, "a file store takes no options"),
        ("s3:///prefix", {}, "name a bucket of 3 to 63 lowercase letters"),
        ("s3://Bad_Bucket/p", {}, "name a bucket of 3 to 63 lowercase letters"),
        ("s3://bucket/p?endpoint=http://x", {}, "give options such as the endpoint URL separately"),
        ("gs://bucket/p", {}, "a checkpoint store URL is file:///path or s3://bucket/prefix"),
        ("/shared/checkpoints", {}, "a checkpoint store URL is file:///path or s3://bucket/prefix"),
    ],
)
def test_bad_store_urls_say_what_is_wrong(url, options, message):
    with pytest.raises(ValueError, match=message):
        store_from_url(url, **options)


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "spaces here"])
def test_bad_checkpoint_keys_are_refused(fs_store, tmp_path, key):
    with pytest.raises(ValueError, match="checkpoint key"):
        CheckpointSync(fs_store).latest(key)


def test_an_unreachable_object_store_falls_back_to_the_backup(fs_store, tmp_path):
    down = S3Store("ckpt", "p", endpoint_url=f"http://127.0.0.1:{free_port()}", timeout_s=1, **CREDENTIALS)
    sync = CheckpointSync(down, backup=fs_store)
    pushed = sync.push(write_checkpoint(tmp_path / "job", step=4, checkpointed_at=T1), "request-7")

    pulled = sync.pull("request-7", tmp_path / "resumed")

    assert pushed == pulled and pulled.url.startswith("file://")


def test_an_s3_compatible_endpoint_can_come_from_the_environment(s3_endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)  # what the agent's README tells operators
    store = store_from_url("s3://ckpt-env/portal", **CREDENTIALS)
    store.client.create_bucket(Bucket="ckpt-env")

    pushed = CheckpointSync(store).push(write_checkpoint(tmp_path / "job", step=2, checkpointed_at=T1), "r")

    assert CheckpointSync(store).latest("r") == pushed


def test_a_longer_key_is_not_mistaken_for_a_copy_of_a_shorter_one(fs_store, tmp_path):
    sync = CheckpointSync(fs_store, keep=1)
    nested = sync.push(write_checkpoint(tmp_path / "nested", step=9, checkpointed_at=T2), "team-a/r1/0")
    sync.push(write_checkpoint(tmp_path / "job", step=1, checkpointed_at=T1), "team-a/r1")
    own = sync.push(write_checkpoint(tmp_path / "job", step=2, checkpointed_at=T1), "team-a/r1")

    assert sync.latest("team-a/r1") == own
    assert sync.latest("team-a/r1/0") == nested  # not pruned as an old copy of team-a/r1


def test_a_push_copies_no_link_a_job_left_only_its_regular_files(fs_store, tmp_path):
    secret = tmp_path / "root-only"
    secret.write_text("the node's secret")
    job_dir = write_checkpoint(tmp_path / "job", step=1)
    (job_dir / "stolen").symlink_to(secret)
    (job_dir / "sub").symlink_to(tmp_path, target_is_directory=True)

    copy = CheckpointSync(fs_store).push(job_dir, "request-1")

    assert "stolen" not in copy.files and not any(path.startswith("sub/") for path in copy.files)
    assert "model.pt" in copy.files


def test_a_pull_writes_nothing_through_a_link_the_job_left_in_its_directory(fs_store, tmp_path):
    job_dir = tmp_path / "job"
    (job_dir / "ckpt").mkdir(parents=True)
    (job_dir / "ckpt" / "weights.bin").write_bytes(b"weights")
    sync = CheckpointSync(fs_store)
    sync.push(job_dir, "request-1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "ckpt").symlink_to(elsewhere, target_is_directory=True)  # planted by the job

    with pytest.raises(OSError):
        sync.pull("request-1", resumed)

    assert list(elsewhere.iterdir()) == []


def test_a_manifest_naming_paths_outside_the_directory_is_not_taken(fs_store, tmp_path):
    sync = CheckpointSync(fs_store)
    copy = sync.push(write_checkpoint(tmp_path / "job", step=1), "request-1")
    manifest_path = fs_store.root / "request-1" / copy.snapshot / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["../escaped"] = manifest["files"]["model.pt"]
    manifest_path.write_text(json.dumps(manifest))

    assert sync.pull("request-1", tmp_path / "resumed") is None
    assert not (tmp_path / "escaped").exists()
