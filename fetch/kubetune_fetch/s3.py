"""s3:// sources, through boto3 (AWS's official client; any S3-compatible store through
AWS_ENDPOINT_URL): one object or every object under a prefix, resumed with ranged reads after a
kill, each checked against the checksum S3 publishes for it."""
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, List
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from . import verify
from .cache import DIGEST, CacheEntry, check_free_space, safe_relative
from .errors import EXIT_RETRYABLE, FetchError
from .download import download_all
from .progress import directory_bytes
from .result import Fetched
from .retry import status_of, with_retries
from .sources import S3Source

_PART = ".part"
_CHUNK = 8 << 20


def client():
    # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION are read by
    # botocore itself; the client retries throttling and 5xx answers before we see them.
    return boto3.client("s3", config=Config(retries={"max_attempts": 5, "mode": "standard"},
                                            region_name=os.environ.get("AWS_REGION", "us-east-1")))


def explain(source: S3Source, e: Exception) -> FetchError:
    code = status_of(e)
    error = e.response.get("Error", {}).get("Code", "") if isinstance(e, ClientError) else ""
    if code in (401, 403) or error in ("AccessDenied", "InvalidAccessKeyId",
                                       "SignatureDoesNotMatch"):
        return FetchError(source.text, f"bucket {source.bucket}: access denied ({code} {error}); "
                                       "check the access key in AWS_ACCESS_KEY_ID/"
                                       "AWS_SECRET_ACCESS_KEY")
    if code == 404 or error in ("NoSuchBucket", "NoSuchKey"):
        return FetchError(source.text, f"not found ({error or code}): no bucket {source.bucket} "
                                       "or nothing under that prefix")
    return FetchError(source.text, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def _objects(s3, source: S3Source) -> (str, List[dict]):
    """The objects the source names and the key prefix their relative names start after: the
    object itself when the prefix is one's key, else everything under PREFIX/."""
    if source.prefix and not source.prefix.endswith("/"):
        try:
            head = s3.head_object(Bucket=source.bucket, Key=source.prefix)
            base = source.prefix.rsplit("/", 1)[0] + "/" if "/" in source.prefix else ""
            return base, [{"Key": source.prefix, "Size": head["ContentLength"],
                           "ETag": head["ETag"]}]
        except ClientError as e:
            if status_of(e) != 404:
                raise
    folder = source.prefix if source.prefix.endswith("/") or not source.prefix else source.prefix + "/"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=folder)
    objects = [o for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    return folder, objects


def _download(s3, source: S3Source, obj: dict, target: Path, log) -> None:
    """Into target + ".part", continuing what a killed fetch left there (a ranged read that holds
    the ETag still: if the object changed meanwhile, S3 answers 412 and we start over)."""
    part = target.with_name(target.name + _PART)
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have > obj["Size"]:
        part.unlink()
        have = 0
    if have < obj["Size"]:
        kwargs = {"Bucket": source.bucket, "Key": obj["Key"], "IfMatch": obj["ETag"]}
        if have:
            kwargs["Range"] = f"bytes={have}-"
            log(f"{source.text}: {obj['Key']}: resuming at byte {have} of {obj['Size']}")
        try:
            body = s3.get_object(**kwargs)["Body"]
        except ClientError as e:
            if status_of(e) == 412:  # changed since it was listed: the listing's digest is stale
                part.unlink(missing_ok=True)
                raise FetchError(source.text, f"{obj['Key']} changed while it was fetched; fetch "
                                              "again", exit_code=EXIT_RETRYABLE) from e
            raise
        # Tests only: a slow link, so that the progress of a small object can be watched.
        limit = float(os.environ.get("KUBETUNE_FETCH_TEST_BYTES_PER_SECOND", "0"))
        with open(part, "ab") as out:
            for chunk in body.iter_chunks(_CHUNK if not limit else 1 << 20):
                out.write(chunk)
                if limit:
                    out.flush()
                    time.sleep(len(chunk) / limit)
    os.replace(part, target)


def _verify(s3, source: S3Source, obj: dict, path: Path) -> dict:
    """Against the object's SHA-256 checksum if it was stored with one, else its ETag."""
    head = s3.head_object(Bucket=source.bucket, Key=obj["Key"], ChecksumMode="ENABLED")
    sha = head.get("ChecksumSHA256")
    if sha and "-" not in sha:  # a whole-object checksum (not a multipart composite)
        ok = verify.sha256_base64(path) == sha
        record = {"sha256": sha}
    else:
        etag = head["ETag"].strip('"')
        parts = int(etag.split("-")[1]) if "-" in etag else 1
        part_size = 8 << 20
        if parts > 1:  # the size of part 1 is the part size the uploader used
            part_size = s3.head_object(Bucket=source.bucket, Key=obj["Key"],
                                       PartNumber=1)["ContentLength"]
        ok = verify.s3_etag(path, parts, part_size) == etag
        record = {"etag": etag}
    if not ok or path.stat().st_size != obj["Size"]:
        path.unlink()
        raise FetchError(source.text, f"{obj['Key']} does not match the checksum S3 publishes "
                                      f"({record}); removed, fetch again", exit_code=EXIT_RETRYABLE)
    return {"size": obj["Size"], **record}


def fetch_s3(source: S3Source, cache_root: Path, log: Callable[[str], None],
             progress_file: Path = None, workers: int = 8, pin: str = None) -> Fetched:
    s3 = client()
    try:
        base, objects = with_retries(source.text, "listing the objects",
                                     lambda: _objects(s3, source), log)
    except FetchError:
        raise
    except Exception as e:  # noqa: BLE001
        raise explain(source, e) from e
    if not objects:
        raise FetchError(source.text, f"no object at or under s3://{source.bucket}/{source.prefix}")
    listing = "\n".join(f"{o['Key']} {o['ETag']} {o['Size']}" for o in sorted(objects, key=lambda o: o["Key"]))
    revision = hashlib.sha256(listing.encode()).hexdigest()[:16]
    if pin and not DIGEST.match(pin):
        raise FetchError(source.text, f"--pin {pin!r} is not a revision this tool wrote")
    if pin and pin != revision:
        raise FetchError(source.text, f"the objects changed since they were first fetched for this "
                                      f"job (revision {pin}, now {revision}): every worker must read "
                                      "the same data")
    endpoint = urlparse(os.environ.get("AWS_ENDPOINT_URL", ""))
    # hostname and port only: never a user:password@ the URL may carry
    host = (endpoint.hostname or "s3.amazonaws.com") + (f"_{endpoint.port}" if endpoint.port else "")
    parts = ["s3", host, source.bucket] + list(safe_relative(source.text, base.rstrip("/")).parts
                                               if base.strip("/") else [])
    entry = CacheEntry(cache_root, parts, revision)
    single = len(objects) == 1 and objects[0]["Key"] == source.prefix
    relative = lambda o: safe_relative(source.text, o["Key"][len(base):])  # noqa: E731
    for o in objects:
        relative(o)  # every key checked before anything is written
    total = sum(o["Size"] for o in objects)
    result = lambda: str(entry.path / relative(objects[0]) if single else entry.path)  # noqa: E731
    with entry.locked():
        if entry.complete():
            log(f"{source.text}: in the cache ({revision}), nothing to download")
            return Fetched(source.text, result(), revision, True, total)
        check_free_space(source.text, entry.dir, total - (directory_bytes(entry.partial)
                                                          if entry.partial.exists() else 0))
        log(f"{source.text}: {len(objects)} objects, {total} bytes")

        download_all(source.text, objects, lambda o: o["Key"],
                     lambda o: _download(s3, source, o, entry.partial / relative(o), log),
                     lambda e: explain(source, e), entry.partial, total, log, progress_file,
                     workers)
        manifest = {"source": source.text, "revision": revision, "files": {}}
        for o in objects:
            try:
                record = _verify(s3, source, o, entry.partial / relative(o))
            except FetchError:
                raise
            except Exception as e:  # noqa: BLE001
                raise explain(source, e) from e
            manifest["files"][str(relative(o))] = record
        entry.finish(manifest)
    return Fetched(source.text, result(), revision, False, total)
