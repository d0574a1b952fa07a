"""kubetune-fetch [--cache DIR] [--link-dir DIR] [--pin SOURCE=REVISION]... [--results FILE]
               [--progress-file FILE] [--metrics-port PORT] [--workers N]
               SOURCE | NAME=SOURCE ...

Fetches each hf:// or s3:// source into the cache (see cache.py) unless it is there already, and
prints one JSON line per source on stdout: {"source", "path", "revision", "cached", "bytes"}. A
Parquet file's path is that of its rows as JSONL, written beside it once (parquet.py).
NAME=SOURCE also makes the symbolic link LINK_DIR/NAME -> the fetched path (how a pod's trainer
finds its model and data at fixed paths). --pin holds a source to the revision an earlier fetch
resolved it to (the preflight's, for every worker): a branch that moved since, or S3 objects that
changed, are an error, not a silent switch. --results writes the JSON list of results to FILE
(the fetch container's termination message, which the operator reads).
Logs (progress, retries, errors) go to stderr. Credentials come from the environment only:
HF_TOKEN; AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_ENDPOINT_URL for an S3-compatible store)
and are never printed. Exit codes: 0, 2 (retrying cannot help: not found, unauthorised, malformed,
disk full), 3 (the network or the server failed after retries, or a checksum did not match).

--restore-checkpoint S3_PREFIX=DIR first puts the newest whole checkpoint under an s3://
checkpoint.dir into DIR (checkpoints.py). kubetune-fetch publish OUTPUT_DIR ... sends a finished
run's output the other way (publish.py).
"""
import argparse
import errno
import json
import os
import re
import sys
import time
from pathlib import Path

from .errors import EXIT_RETRYABLE, EXIT_USER_ERROR, FetchError
from .parquet import as_jsonl
from .sources import HubSource, S3Source, parse_source


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} kubetune-fetch {line}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    return Path(os.environ.get("KUBETUNE_SOURCE_CACHE",
                               Path.home() / ".cache" / "kubetune" / "sources"))


def fetch(text: str, cache: Path, progress_file, workers: int, pin: str = None):
    source = parse_source(text)
    if isinstance(source, HubSource) and source.split:
        from .dataset_split import fetch_split  # a dataset's split: its files, as one JSONL
        result = fetch_split(source, cache, log, progress_file, workers, pin)
    elif isinstance(source, HubSource):
        from .hub import fetch_hub  # imported when needed: an S3-only image need not have it
        result = fetch_hub(source, cache, log, progress_file, workers, pin)
    else:
        from .s3 import fetch_s3
        result = fetch_s3(source, cache, log, progress_file, workers, pin)
    # A Parquet file is handed on as the JSONL the trainer reads (parquet.py).
    result.path = str(as_jsonl(Path(result.path), log))
    return result


def split_name(arg: str, link_dir) -> tuple:
    """NAME=SOURCE (with --link-dir) or SOURCE."""
    if link_dir is None:
        return None, arg
    name, sep, source = arg.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+", name) or name in (".", ".."):
        raise FetchError(arg, "with --link-dir, each argument is NAME=SOURCE (NAME a file name)")
    return name, source


def link(link_dir: Path, name: str, target: str) -> None:
    link_dir.mkdir(parents=True, exist_ok=True)
    tmp = link_dir / f".{name}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link_dir / name)  # atomic: a reader sees the old link or the new one


def restore_checkpoint(args) -> int:
    """checkpoint.dir s3://: the newest whole checkpoint, where the trainer looks for its own."""
    from .checkpoints import restore

    text, sep, local = args.restore_checkpoint.rpartition("=")
    try:
        source = parse_source(text) if sep else None
        if not isinstance(source, S3Source):
            raise FetchError(args.restore_checkpoint, "--restore-checkpoint takes s3://BUCKET/PREFIX=DIR")
        restore(source, Path(local), log)
    except FetchError as e:
        return failed(args, str(e), e.exit_code)
    except OSError as e:
        return failed(args, f"{args.restore_checkpoint}: {e}", EXIT_RETRYABLE)
    return 0


def failed(args, why: str, code: int) -> int:
    """Logs the error; with --results, writes it there alone (the pod's termination message, which
    the operator puts in the job's Failed condition)."""
    log(f"error: {why}")
    if args.results:
        args.results.write_text(why)
    return code


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["publish"]:  # kubetune-fetch publish: a run's output to where it goes
        from .publish import main as publish
        return publish(argv[1:])
    parser = argparse.ArgumentParser(prog="kubetune-fetch", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", metavar="SOURCE")
    parser.add_argument("--restore-checkpoint", metavar="S3_PREFIX=DIR",
                        help="the newest whole checkpoint under S3_PREFIX into DIR (checkpoints.py)")
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--link-dir", type=Path, help="where NAME=SOURCE links go")
    parser.add_argument("--pin", action="append", default=[], metavar="SOURCE=REVISION")
    parser.add_argument("--results", type=Path, help="the JSON list of results, written at the end")
    parser.add_argument("--progress-file", type=Path, help="progress as JSON, replaced as it goes")
    parser.add_argument("--workers", type=int, default=8, help="files fetched at once")
    parser.add_argument("--metrics-port", type=int, help="serve progress as Prometheus text here")
    args = parser.parse_args(argv)
    if args.metrics_port:
        from . import metrics
        if metrics.serve(args.metrics_port) is None:
            log(f"cannot serve progress on port {args.metrics_port}; fetching without")
    if not args.sources and not args.restore_checkpoint:
        parser.error("nothing to fetch: give a SOURCE or --restore-checkpoint")
    if args.restore_checkpoint:
        code = restore_checkpoint(args)
        if code != 0:
            return code
    pins = dict(p.rsplit("=", 1) for p in args.pin if "=" in p)
    results = []
    for arg in args.sources:
        text = arg
        try:
            name, text = split_name(arg, args.link_dir)
            result = fetch(text, args.cache, args.progress_file, args.workers, pins.get(text))
            if name:
                link(args.link_dir, name, result.path)
        except FetchError as e:
            return failed(args, str(e), e.exit_code)
        except PermissionError as e:
            return failed(args, f"{text}: {e.strerror}: {e.filename}", EXIT_USER_ERROR)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                return failed(args, f"{text}: disk full in {args.cache}: {e.strerror}",
                              EXIT_USER_ERROR)
            return failed(args, f"{text}: {e}", EXIT_RETRYABLE)
        print(json.dumps(result.as_dict()), flush=True)
        results.append(result.as_dict())
    if args.results:
        args.results.write_text(json.dumps(
            [{k: r[k] for k in ("source", "revision", "bytes", "cached")} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
