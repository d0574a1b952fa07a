"""Files to s3://BUCKET/PREFIX, each checked against what S3 says it received, and resumable.

- Parts: a file of up to one part is one PUT; a larger one a multipart upload in parts of
  `part_size(size)` (16 MiB, more for files that would need over 10,000 parts). The part size
  depends on the file's size alone, so an upload started by another process continues with it.
- Checked: each part's ETag (the MD5 of the bytes S3 stored) must be the MD5 of the bytes we
  read; a part that arrives otherwise is sent again (`PART_ATTEMPTS` times). The whole object's
  ETag must then be the one its parts make (verify.s3_etag). Content-MD5 is sent too, so a store
  that checks it refuses a damaged part before storing it.
- Resumed: a file whose object is already there with its size and ETag is not sent again; an
  interrupted multipart upload of it (S3 keeps its parts until it is completed or aborted) keeps
  the parts whose ETag and size match ours and sends only the others.
- Whole: a folder (a run's output, a checkpoint) is whole in S3 when its COMPLETE_FILE is there,
  written after every file, with each file's size and SHA-256 (`upload_folder`).
"""
import base64
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Dict, Optional

from botocore.exceptions import ClientError

from . import verify
from .errors import EXIT_RETRYABLE, FetchError
from .retry import status_of, with_retries
from .sources import S3Source

# common/contracts.h's kOutputCompleteFile (tests/fetch/contract_test.py holds them equal).
COMPLETE_FILE = "kubetune-complete.json"

MIN_PART = 16 << 20
MAX_PARTS = 10_000
PART_ATTEMPTS = 3
# Tests only: the first N parts sent have one byte changed on the way (what a bad link does).
_CORRUPT_ENV = "KUBETUNE_PUBLISH_TEST_CORRUPT_PARTS"
# Tests only: a pause after each part, so that an upload can be killed half done.
_SECONDS_PER_PART = float(os.environ.get("KUBETUNE_PUBLISH_TEST_SECONDS_PER_PART", "0"))


def part_size(size: int) -> int:
    """16 MiB, or the MiB multiple that keeps a file within S3's 10,000 parts."""
    needed = -(-size // MAX_PARTS)
    return max(MIN_PART, -(-needed // (1 << 20)) * (1 << 20))


def key_prefix(dest: S3Source) -> str:
    """The keys under s3://BUCKET/PREFIX start with this: PREFIX/ ("" for a whole bucket)."""
    return dest.prefix.rstrip("/") + "/" if dest.prefix.strip("/") else ""


def _read_part(path: Path, number: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek((number - 1) * size)
        return f.read(size)


class Uploader:
    """One bucket; `where` names the destination in every error (s3://BUCKET/PREFIX)."""

    def __init__(self, s3, bucket: str, where: str, log: Callable[[str], None]):
        self.s3, self.bucket, self.where, self.log = s3, bucket, where, log
        self._corrupt_left = int(os.environ.get(_CORRUPT_ENV, "0"))

    def _call(self, what: str, fn):
        return with_retries(self.where, what, fn, self.log)

    def _sent(self, body: bytes) -> bytes:
        if self._corrupt_left <= 0 or not body:
            return body
        self._corrupt_left -= 1
        return bytes([body[0] ^ 0xFF]) + body[1:]

    def existing(self, key: str) -> Optional[tuple]:
        """(ETag, size) of the object at `key`, or None."""
        try:
            head = self._call(f"reading {key}", lambda: self.s3.head_object(Bucket=self.bucket, Key=key))
        except ClientError as e:
            if status_of(e) == 404:
                return None
            raise
        return head["ETag"].strip('"'), head["ContentLength"]

    def upload(self, path: Path, key: str) -> dict:
        """Sends `path` to `key` unless it is there already; returns its size, SHA-256 and ETag
        (the marker's record of it)."""
        size = path.stat().st_size
        psize = part_size(size)
        parts = max(1, -(-size // psize))
        sha256 = hashlib.sha256()
        expected = verify.s3_etag(path, parts, psize, also=sha256)
        record = {"size": size, "sha256": sha256.hexdigest(), "etag": expected}
        existing = self.existing(key)
        if existing == (expected, size):
            self.log(f"{self.where}: {key} is there already ({size} bytes, ETag {expected})")
            return record
        if parts == 1:
            self._put(path, key)
        else:
            self._multipart(path, key, parts, psize)
        got = self.existing(key)
        if got != (expected, size):
            raise FetchError(self.where, f"{key}: S3 holds ETag {got[0] if got else None} and "
                                         f"{got[1] if got else 0} bytes, expected {expected} and "
                                         f"{size}; upload again", EXIT_RETRYABLE)
        return record

    def upload_folder(self, files: Dict[str, Path], prefix: str, marker: dict) -> dict:
        """Each of `files` (relative name -> path) under `prefix`, then COMPLETE_FILE with `marker`
        and every file's record, last; deleted first, so that a folder written again is not
        taken for whole meanwhile. Returns the marker written."""
        self.s3.delete_object(Bucket=self.bucket, Key=prefix + COMPLETE_FILE)
        records = {}
        for n, (rel, path) in enumerate(sorted(files.items()), 1):
            records[rel] = self.upload(path, prefix + rel)
            self.log(f"{self.where}: {n}/{len(files)} {rel} ({records[rel]['size']} bytes)")
        written = {**marker, "files": records,
                   "uploaded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.s3.put_object(Bucket=self.bucket, Key=prefix + COMPLETE_FILE,
                           Body=json.dumps(written, indent=1).encode())
        return written

    def _send_checked(self, key: str, what: str, body: bytes, send) -> str:
        """send(data, content_md5) -> ETag; resent until S3's ETag is our MD5."""
        md5 = hashlib.md5(body)
        what = f"{key} {what}".strip()
        content_md5 = base64.b64encode(md5.digest()).decode()
        for attempt in range(1, PART_ATTEMPTS + 1):
            try:
                etag = self._call(f"sending {what}", lambda: send(self._sent(body), content_md5))
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("BadDigest", "InvalidDigest"):
                    raise
                etag = "(refused: the bytes did not match their Content-MD5)"
            if etag.strip('"') == md5.hexdigest():
                return md5.hexdigest()
            self.log(f"{self.where}: {what}: S3 received other bytes than were sent "
                     f"(ETag {etag.strip(chr(34))}, MD5 {md5.hexdigest()}); sending it again "
                     f"({attempt}/{PART_ATTEMPTS})")
        raise FetchError(self.where, f"{what} arrived damaged {PART_ATTEMPTS} times (its "
                                     "ETag is not the MD5 of what was sent)", EXIT_RETRYABLE)

    def _put(self, path: Path, key: str) -> None:
        body = path.read_bytes()
        self._send_checked(key, "", body, lambda data, md5: self.s3.put_object(
            Bucket=self.bucket, Key=key, Body=data, ContentMD5=md5)["ETag"])

    def _open_upload(self, key: str) -> (str, Dict[int, tuple]):
        """The newest unfinished multipart upload of `key` and its parts {number: (etag, size)},
        or a new one; older unfinished ones are aborted (S3 would keep their parts)."""
        listed = self._call(f"listing unfinished uploads of {key}", lambda: self.s3.list_multipart_uploads(
            Bucket=self.bucket, Prefix=key))
        uploads = sorted((u for u in listed.get("Uploads", []) if u["Key"] == key),
                         key=lambda u: u["Initiated"])
        for stale in uploads[:-1]:
            self._call(f"aborting an old upload of {key}", lambda: self.s3.abort_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=stale["UploadId"]))
        if not uploads:
            created = self._call(f"starting {key}", lambda: self.s3.create_multipart_upload(
                Bucket=self.bucket, Key=key))
            return created["UploadId"], {}
        upload_id = uploads[-1]["UploadId"]
        have = {}
        pages = self.s3.get_paginator("list_parts").paginate(Bucket=self.bucket, Key=key,
                                                             UploadId=upload_id)
        for page in self._call(f"listing the parts of {key}", lambda: list(pages)):
            for p in page.get("Parts", []):
                have[p["PartNumber"]] = (p["ETag"].strip('"'), p["Size"])
        return upload_id, have

    def _multipart(self, path: Path, key: str, parts: int, psize: int) -> None:
        upload_id, have = self._open_upload(key)
        etags, kept = [], 0
        for number in range(1, parts + 1):
            body = _read_part(path, number, psize)
            md5 = hashlib.md5(body).hexdigest()
            if have.get(number) == (md5, len(body)):
                kept += 1
            else:
                md5 = self._send_checked(key, f"part {number} of {parts}", body, lambda data, m, n=number: (
                    self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                        PartNumber=n, Body=data, ContentMD5=m)["ETag"]))
            etags.append({"PartNumber": number, "ETag": f'"{md5}"'})
            if _SECONDS_PER_PART:
                time.sleep(_SECONDS_PER_PART)
        if kept:
            self.log(f"{self.where}: {key}: resumed an interrupted upload, {kept} of {parts} parts "
                     "were there already")
        self._call(f"completing {key}", lambda: self.s3.complete_multipart_upload(
            Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": etags}))
