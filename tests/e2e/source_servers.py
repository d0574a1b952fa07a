#!/usr/bin/env python3
"""olah (a Hugging Face Hub mirror) and moto's S3 server on 127.0.0.1 for operator_e2e.sh, with the
repositories and objects of tests/fetch/fetch_test.py, plus a 64 MiB JSONL object whose download
can be watched. Prints {"hf": URL, "s3": URL} on one line, then serves until stdin closes.

usage: source_servers.py   (KUBETUNE_SOURCE_DIR: the repository)"""
import json
import os
import signal
import sys
from pathlib import Path

ROOT = Path(os.environ["KUBETUNE_SOURCE_DIR"])
sys.path.insert(0, str(ROOT / "tests/fetch"))
from fetch_test import Servers  # noqa: E402

signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that `finally` stops the servers
servers = Servers()
try:
    lines = (ROOT / "examples/default/train.jsonl").read_bytes()
    servers.s3_client().put_object(Bucket="kubetune-data", Key="chat/big/train.jsonl",
                                   Body=lines * ((64 << 20) // len(lines) + 1))
    print(json.dumps({"hf": servers.hf, "s3": servers.s3}), flush=True)
    sys.stdin.read()
finally:
    servers.stop()
