"""Checks a downloaded file against the checksum its server publishes.

- Hugging Face Hub: the sha256 of an LFS file (`lfs.sha256`), else the git blob id (`blob_id`,
  the sha1 of "blob <size>\\0" + content, as git computes it).
- S3: the object's SHA-256 checksum when it was stored with one, else its ETag: the MD5 of the
  content for a single-part upload, or for a multipart one the MD5 of the parts' MD5s with "-N"
  (parts of `part_size`, boto3's default of 8 MiB unless the caller knows better).
"""
import base64
import hashlib
from pathlib import Path

_CHUNK = 8 << 20


def _digest(path: Path, h, prefix: bytes = b""):
    h.update(prefix)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h


def sha256_hex(path: Path) -> str:
    return _digest(path, hashlib.sha256()).hexdigest()


def git_blob_sha1(path: Path) -> str:
    size = path.stat().st_size
    return _digest(path, hashlib.sha1(), f"blob {size}\0".encode()).hexdigest()


def sha256_base64(path: Path) -> str:
    return base64.b64encode(_digest(path, hashlib.sha256()).digest()).decode()


def s3_etag(path: Path, parts: int, part_size: int = 8 << 20, also=None) -> str:
    """The ETag S3 gives an object uploaded in `parts` parts (1: a plain PUT). `also`, a hashlib
    object, is fed the same bytes: two digests for one read of the file."""
    whole, md5s = hashlib.md5(), []
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            if parts <= 1:
                whole.update(chunk)
            else:
                md5s.append(hashlib.md5(chunk).digest())
            if also is not None:
                also.update(chunk)
    if parts <= 1:
        return whole.hexdigest()
    return f"{hashlib.md5(b''.join(md5s)).hexdigest()}-{len(md5s)}"
