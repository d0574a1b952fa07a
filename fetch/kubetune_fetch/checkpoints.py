"""Checkpoints in S3 (`checkpoint.dir: s3://BUCKET/PREFIX`): a job resumes where it was, on this
cluster or another.

The trainer writes its checkpoints to a local folder as always (trainer/loop/checkpoint.h:
`step-NNNNNNNN/`, each renamed into place only when whole, its trainer_state.json holding every
file's size and checksum). Beside it, kubetune-fetch:
- syncs (`CheckpointSync`, run by `publish --sync-checkpoints` while it waits for the trainer, and
  once more at its end): each local checkpoint not yet in S3 is uploaded to PREFIX/step-N/
  (upload.py: checked, resumable), COMPLETE_FILE last, with every file's size and SHA-256; the
  checkpoints beyond the newest `keep_last` are then removed from S3, their marker first;
- restores (`restore`, run by the fetch init container before the trainer starts): the newest
  checkpoint whose marker is in S3 is downloaded into LOCAL/step-N, through a hidden folder renamed
  when every file matches the marker's SHA-256. The trainer then resumes from it as from its own
  (and checks it again against trainer_state.json).
A checkpoint without its marker in S3 (an upload cut short) is never restored.
"""
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, List, Optional

from . import verify
from .errors import EXIT_RETRYABLE, FetchError
from .sources import S3Source
from .upload import COMPLETE_FILE, key_prefix  # the same mark of a whole folder, in S3

STEP = re.compile(r"^step-\d{8}$")  # trainer/loop/checkpoint.cpp's folder names
STATE_FILE = "trainer_state.json"


def local_checkpoints(local: Path) -> List[Path]:
    """The whole checkpoints of a local folder, oldest first (hidden temporary folders and folders
    without their state file are not checkpoints)."""
    if not local.is_dir():
        return []
    return sorted(p for p in local.iterdir()
                  if p.is_dir() and STEP.match(p.name) and (p / STATE_FILE).is_file())


def remote_checkpoints(s3, dest: S3Source) -> List[str]:
    """The names of the checkpoints whose marker is in S3, oldest first."""
    prefix = key_prefix(dest)
    names = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=dest.bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            parts = o["Key"][len(prefix):].split("/")
            if len(parts) == 2 and STEP.match(parts[0]) and parts[1] == COMPLETE_FILE:
                names.add(parts[0])
    return sorted(names)


def _delete_checkpoint(s3, dest: S3Source, name: str) -> None:
    folder = key_prefix(dest) + name + "/"
    s3.delete_object(Bucket=dest.bucket, Key=folder + COMPLETE_FILE)  # not whole from now on
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=dest.bucket, Prefix=folder):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=dest.bucket, Key=o["Key"])


class CheckpointSync:
    """Uploads the checkpoints of `local` that S3 does not have yet; keeps the newest `keep_last`."""

    def __init__(self, local: Path, dest: S3Source, keep_last: int, log: Callable[[str], None]):
        from .s3 import client
        from .upload import Uploader

        self.local, self.dest, self.keep_last, self.log = local, dest, keep_last, log
        self.s3 = client()
        self.uploader = Uploader(self.s3, dest.bucket, dest.text, log)
        self.done = set(remote_checkpoints(self.s3, dest))

    def sync_once(self) -> None:
        from .s3 import explain

        try:
            self._sync()
        except FetchError:
            raise
        except Exception as e:  # noqa: BLE001
            raise explain(self.dest, e) from e

    def _sync(self) -> None:
        for checkpoint in local_checkpoints(self.local):
            if checkpoint.name not in self.done:
                self._upload(checkpoint)
                self.done.add(checkpoint.name)
        for name in sorted(self.done)[:-self.keep_last] if self.keep_last > 0 else []:
            _delete_checkpoint(self.s3, self.dest, name)
            self.done.discard(name)
            self.log(f"{self.dest.text}: removed {name} (checkpoint.keepLast {self.keep_last})")

    def _upload(self, checkpoint: Path) -> None:
        files = {p.relative_to(checkpoint).as_posix(): p for p in checkpoint.rglob("*") if p.is_file()}
        self.uploader.upload_folder(files, key_prefix(self.dest) + checkpoint.name + "/",
                                    {"checkpoint": checkpoint.name})
        self.log(f"{self.dest.text}: uploaded {checkpoint.name} ({len(files)} files)")


def restore(dest: S3Source, local: Path, log: Callable[[str], None]) -> Optional[Path]:
    """The newest whole checkpoint in S3, into local/step-N (unless it is there already); None when
    S3 has none."""
    from .s3 import client, explain

    s3 = client()
    try:
        names = remote_checkpoints(s3, dest)
        if not names:
            log(f"{dest.text}: no checkpoint yet; the run starts from the beginning")
            return None
        name = names[-1]
        target = local / name
        if target.is_dir() and (target / STATE_FILE).is_file():
            log(f"{dest.text}: {name} is here already")
            return target
        folder = key_prefix(dest) + name + "/"
        marker = json.loads(s3.get_object(Bucket=dest.bucket, Key=folder + COMPLETE_FILE)["Body"].read())
        partial = local / f".{name}.restoring"
        shutil.rmtree(partial, ignore_errors=True)
        for rel, expected in sorted(marker["files"].items()):
            path = partial / rel
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise FetchError(dest.text, f"{name}: {rel} would leave the checkpoint folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(dest.bucket, folder + rel, str(path))
            if verify.sha256_hex(path) != expected["sha256"]:
                shutil.rmtree(partial)
                raise FetchError(dest.text, f"{name}/{rel} does not match the SHA-256 its "
                                            f"{COMPLETE_FILE} records; restore again", EXIT_RETRYABLE)
        shutil.rmtree(target, ignore_errors=True)  # what a trainer killed mid-write may leave
        os.replace(partial, target)
    except FetchError:
        raise
    except Exception as e:  # noqa: BLE001
        raise explain(dest, e) from e
    log(f"{dest.text}: restored {name} ({len(marker['files'])} files) into {local}")
    return target
