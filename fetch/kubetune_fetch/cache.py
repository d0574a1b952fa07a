"""Where a fetched source lives: one folder per source and resolved revision (a commit sha, or a
digest of the objects' ETags), so a gang restart, a resumed job or a second job on the same
model finds it and downloads nothing.

    <cache>/hf/models/ORG/NAME/<commit>/
    <cache>/hf/datasets/ORG/NAME/<commit>/<PATH, '/' as '--'>/<commit>/PATH   (one per file)
    <cache>/s3/<endpoint host>[_<port>]/BUCKET/PREFIX/<digest>/

A fetch writes into `<revision>.partial/` (kept across a kill, so the next fetch resumes it) and
renames it to `<revision>/` only once every file is verified, with `.kubetune-complete.json`
(what was fetched, with checksums) inside: a folder without that file is never taken for a whole
one. Two fetchers of the same entry (two jobs, two nodes on a shared volume) take turns on
`<revision>.lock`.
"""
import contextlib
import fcntl
import json
import os
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Iterator, List

from .errors import FetchError

MARKER = ".kubetune-complete.json"
COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a Hub commit sha
DIGEST = re.compile(r"^[0-9a-f]{16}$")  # an S3 listing's digest (s3.py)


def safe_relative(source: str, name: str) -> PurePosixPath:
    """`name` (an S3 key below the prefix, a file of a repository) as a path that stays inside
    the folder it is joined to: no absolute path, no empty, "." or ".." segment."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise FetchError(source, f"refusing {name!r}: a file name that would leave the cache folder")
    return PurePosixPath(*parts)


class CacheEntry:
    def __init__(self, root: Path, parts: List[str], revision: str):
        for part in parts + [revision]:
            if part in ("", ".", "..") or "/" in part:
                raise FetchError("/".join(parts), f"refusing cache folder part {part!r}")
        self.dir = root.joinpath(*parts)
        self.path = self.dir / revision
        self.partial = self.dir / f"{revision}.partial"
        self.lock_file = self.dir / f"{revision}.lock"

    def complete(self) -> bool:
        return (self.path / MARKER).is_file()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            lock = open(self.lock_file, "a")
        except PermissionError as e:
            raise FetchError(str(self.dir), f"cannot write the cache: {e.strerror} (the cache "
                                            "volume must be writable by the fetch's user)") from e
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def finish(self, manifest: dict) -> None:
        """Marks the partial folder whole and puts it in place, atomically."""
        (self.partial / MARKER).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        if self.path.exists():  # a folder without the marker: an older, interrupted layout
            shutil.rmtree(self.path)
        os.rename(self.partial, self.path)


def check_free_space(source: str, where: Path, needed: int) -> None:
    where.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(where).free
    if free < needed:
        raise FetchError(source, f"disk full: {needed} more bytes are needed in {where}, "
                                 f"{free} are free")

