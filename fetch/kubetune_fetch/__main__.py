"""kubetune-fetch [--cache DIR] [--progress-file FILE] [--workers N] SOURCE...

Fetches each hf:// or s3:// source into the cache (see cache.py) unless it is there already, and
prints one JSON line per source on stdout: {"source", "path", "revision", "cached", "bytes"}.
Logs (progress, retries, errors) go to stderr. Credentials come from the environment only:
HF_TOKEN; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_ENDPOINT_URL for an S3-compatible store)
and are never printed. Exit codes: 0, 2 (retrying cannot help: not found, unauthorised, malformed,
disk full), 3 (the network or the server failed after retries, or a checksum did not match).
"""
import argparse
import errno
import json
import os
import sys
import time
from pathlib import Path

from .errors import EXIT_RETRYABLE, EXIT_USER_ERROR, FetchError
from .sources import HubSource, parse_source


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} kubetune-fetch {line}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    return Path(os.environ.get("KUBETUNE_SOURCE_CACHE",
                               Path.home() / ".cache" / "kubetune" / "sources"))


def fetch(text: str, cache: Path, progress_file, workers: int):
    source = parse_source(text)
    if isinstance(source, HubSource):
        from .hub import fetch_hub  # imported when needed: an S3-only image need not have it
        return fetch_hub(source, cache, log, progress_file, workers)
    from .s3 import fetch_s3
    return fetch_s3(source, cache, log, progress_file, workers)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kubetune-fetch", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", metavar="SOURCE")
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--progress-file", type=Path, help="progress as JSON, replaced as it goes")
    parser.add_argument("--workers", type=int, default=8, help="files fetched at once")
    args = parser.parse_args(argv)
    for text in args.sources:
        try:
            result = fetch(text, args.cache, args.progress_file, args.workers)
        except FetchError as e:
            log(f"error: {e}")
            return e.exit_code
        except OSError as e:
            if e.errno == errno.ENOSPC:
                log(f"error: {text}: disk full in {args.cache}: {e.strerror}")
                return EXIT_USER_ERROR
            log(f"error: {text}: {e}")
            return EXIT_RETRYABLE
        print(json.dumps(result.as_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
