"""kubetune-publish: a finished run's output folder where the job said it goes.

    kubetune-fetch publish OUTPUT_DIR [--gguf TYPE]... [--to s3://BUCKET/PREFIX]
        [--wait-for-trainer] [--results FILE]
        [--sync-checkpoints LOCAL_DIR --checkpoints-to s3://BUCKET/PREFIX --keep-last N]

1. --wait-for-trainer: waits until the trainer has marked OUTPUT_DIR whole (COMPLETE_FILE, which
   it writes last, naming the host it ran on: this pod's, not an earlier run's on the same volume).
   How the publish container of rank 0's pod starts after the trainer beside it ends well; when
   the trainer fails, the operator deletes the pod and this with it. Meanwhile, with
   --sync-checkpoints, each checkpoint the trainer writes is uploaded (checkpoints.py).
2. --gguf: GGUF files of the model (OUTPUT_DIR/merged, or OUTPUT_DIR itself after a full
   fine-tune) into OUTPUT_DIR/gguf, by llama.cpp's tools (export_gguf.py).
3. --to: every file of OUTPUT_DIR but its checkpoints (upload.py: multipart, each part checked,
   resumed after a kill), then COMPLETE_FILE last, with every file's size and SHA-256: a reader
   that finds it knows the prefix is whole. It is deleted first, so a prefix being written again
   is never taken for whole.
Prints, and writes to --results (the container's termination message, which the operator puts in
status.outputs), where each result is: [{"name", "uri", "bytes"}]. Credentials come from the
environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL); exit codes as fetch's.
"""
import argparse
import json
import socket
import sys
import time
from pathlib import Path

from .errors import EXIT_USER_ERROR, FetchError
from .sources import S3Source, parse_source
from .upload import COMPLETE_FILE
CHECKPOINTS = "checkpoints"  # common/contracts.h's default_checkpoint_dir: never uploaded
WAIT_LOG_SECONDS = 60


def log(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} kubetune-publish {line}", file=sys.stderr, flush=True)


def read_marker(out: Path) -> dict:
    try:
        return json.loads((out / COMPLETE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def wait_for_trainer(out: Path, host: str, while_waiting=lambda: None,
                     poll_seconds: float = 2) -> dict:
    started = last_log = time.monotonic()
    while True:
        while_waiting()
        marker = read_marker(out)
        if marker.get("host") == host:
            log(f"{out}: the trainer finished (step {marker.get('step')})")
            return marker
        if time.monotonic() - last_log >= WAIT_LOG_SECONDS:
            last_log = time.monotonic()
            log(f"{out}: waiting for the trainer to finish ({time.monotonic() - started:.0f} s)")
        time.sleep(poll_seconds)


def model_folder(out: Path) -> Path:
    """What GGUF files are made of: the merged model, or a full fine-tune's folder."""
    for candidate in (out / "merged", out):
        if (candidate / "config.json").is_file():
            return candidate
    raise FetchError(str(out), "output.gguf needs a model folder, and there is none: for lora and "
                               "qlora set output.saveMerged (the GGUF files are made from "
                               "<output.dir>/merged)")


def export_gguf(out: Path, kinds) -> list:
    from .export_gguf import ExportError, export  # the export image's: torch, llama.cpp

    try:
        return export(model_folder(out), out / "gguf", kinds, log)
    except ExportError as e:
        raise FetchError(str(out), f"gguf export: {e}", EXIT_USER_ERROR) from e


def files_to_upload(out: Path) -> list:
    return sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()
                  and p.relative_to(out).parts[0] not in (CHECKPOINTS, COMPLETE_FILE)
                  and not p.name.endswith(".partial"))


def upload(out: Path, dest: S3Source, marker: dict) -> dict:
    """Every file, then the marker; returns the marker written."""
    from .s3 import client, explain
    from .upload import Uploader, key_prefix

    files = {p.relative_to(out).as_posix(): p for p in files_to_upload(out)}
    try:
        return Uploader(client(), dest.bucket, dest.text, log).upload_folder(
            files, key_prefix(dest), marker)
    except FetchError:
        raise
    except Exception as e:  # noqa: BLE001
        raise explain(dest, e) from e


def results(out: Path, dest, gguf_files: list) -> list:
    """Where each result is: the adapter or model, the merged model, each GGUF file."""
    base = dest.text.rstrip("/") + "/" if dest else str(out).rstrip("/") + "/"
    found = [{"name": "adapter" if (out / "adapter_config.json").is_file() else "model",
              "uri": base}]
    if (out / "merged").is_dir():
        found.append({"name": "merged", "uri": base + "merged/"})
    for path in gguf_files:
        found.append({"name": "gguf-" + path.stem.removeprefix("model-"),
                      "uri": base + path.relative_to(out).as_posix()})
    return found


def checkpoint_sync(args):
    """The checkpoints' upload (checkpoint.dir s3://), when asked for."""
    if not args.sync_checkpoints:
        return None
    dest = parse_source(args.checkpoints_to or "")
    if not isinstance(dest, S3Source):
        raise FetchError(str(args.checkpoints_to), "--checkpoints-to: expected s3://BUCKET/PREFIX")
    from .checkpoints import CheckpointSync
    from .s3 import explain

    try:
        return CheckpointSync(args.sync_checkpoints, dest, args.keep_last, log)
    except Exception as e:  # noqa: BLE001
        raise explain(dest, e) from e


def failed(args, why: str, code: int) -> int:
    log(f"error: {why}")
    if args.results:
        args.results.write_text(why)
    return code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="kubetune-fetch publish",
                                     description="a finished run's output where the job said")
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--to", help="s3://BUCKET/PREFIX")
    parser.add_argument("--gguf", action="append", default=[], metavar="TYPE")
    parser.add_argument("--wait-for-trainer", action="store_true")
    parser.add_argument("--sync-checkpoints", type=Path, metavar="LOCAL_DIR",
                        help="upload the checkpoints of this folder as they appear (checkpoints.py)")
    parser.add_argument("--checkpoints-to", help="s3://BUCKET/PREFIX the checkpoints go to")
    parser.add_argument("--keep-last", type=int, default=0, help="checkpoints kept in S3 (0: all)")
    parser.add_argument("--results", type=Path)
    args = parser.parse_args(argv)
    out = args.output_dir
    try:
        dest = parse_source(args.to) if args.to else None
        if dest is not None and not isinstance(dest, S3Source):
            raise FetchError(args.to, "expected s3://BUCKET/PREFIX")
        sync = checkpoint_sync(args)
        marker = (wait_for_trainer(out, socket.gethostname(), sync.sync_once if sync else lambda: None)
                  if args.wait_for_trainer else read_marker(out))
        if sync:
            sync.sync_once()  # the final checkpoint, written just before the outputs
        gguf_files = export_gguf(out, args.gguf) if args.gguf else []
        if dest is not None:
            upload(out, dest, marker)
            log(f"{dest.text}: complete ({COMPLETE_FILE} written last)")
    except FetchError as e:
        return failed(args, str(e), e.exit_code)
    except OSError as e:  # the output folder cannot be read: nothing a retry would change
        return failed(args, f"{out}: {e}", EXIT_USER_ERROR)
    found = results(out, dest, gguf_files)
    print(json.dumps(found), flush=True)
    if args.results:
        args.results.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
