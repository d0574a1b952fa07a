#!/usr/bin/env python3
"""kubetune-fetch against real servers on 127.0.0.1, not hand-written fakes:

- olah (a self-hosted Hugging Face Hub mirror that huggingface_hub talks to through HF_ENDPOINT)
  serving a tiny model repository and a dataset repository from local git repositories;
- moto's S3 server (the server S3 clients are tested against) holding a prefix of objects: a
  multipart upload, one stored with a SHA-256 checksum, a plain one.

What we fetch must be byte-identical to what huggingface_hub.snapshot_download / hf_hub_download
and boto3 fetch from the same server; a killed fetch resumes; a corrupted byte is refused; a
missing repository, revision, bucket, bad credentials and a dead endpoint are named, with the exit
code that says whether retrying helps.

usage: fetch_test.py [TEST_NAME...]   (KUBETUNE_SOURCE_DIR: the repository)
"""
import filecmp
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import boto3
import celpy
import numpy as np
import yaml
from boto3.s3.transfer import TransferConfig
from huggingface_hub import hf_hub_download, snapshot_download
from safetensors.numpy import save_file

ROOT = Path(os.environ["KUBETUNE_SOURCE_DIR"])
BIN_DIR = os.environ.get("KUBETUNE_BIN_DIR", "")  # kubetune and kubetune-trainer, when built
sys.path.insert(0, str(ROOT / "fetch"))
from kubetune_fetch.errors import FetchError  # noqa: E402
from kubetune_fetch.hub import MODEL_FILES  # noqa: E402
from kubetune_fetch.sources import HubSource, S3Source, parse_source  # noqa: E402

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url_port: int, what: str, proc: subprocess.Popen, log: Path):
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", url_port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start: {log.read_text()[-2000:]}")


def git_repo(path: Path, files: dict):
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "v1"],
                ["tag", "v1"]):
        subprocess.run(["git", *cmd], cwd=path, check=True, env=env)


def tiny_model_files() -> dict:
    """A tiny Llama checkpoint as the trainer reads one, and the files it must not fetch."""
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((256, 64), dtype=np.float32),
               "model.norm.weight": np.ones(64, dtype=np.float32)}
    tmp = Path(tempfile.mkdtemp()) / "model.safetensors"
    save_file(tensors, str(tmp))
    tok = ROOT / "examples/default/tokenizer"
    files = {"model.safetensors": tmp.read_bytes(),
             "config.json": (ROOT / "examples/default/model_config.json").read_bytes(),
             "generation_config.json": b'{"eos_token_id": 2}\n',
             "README.md": b"# tiny\n",
             "pytorch_model.bin": b"pickle of the same tensors",
             "original/consolidated.00.pth": b"the same again"}
    for f in tok.iterdir():
        files[f.name] = f.read_bytes()
    return files


def sharegpt(record: dict) -> dict:
    """A messages record of the demo data as ShareGPT publishes conversations."""
    role = {"user": "human", "assistant": "gpt", "system": "system"}
    return {"conversations": [{"from": role[m["role"]], "value": m["content"]} for m in record["messages"]]}


def parquet_bytes(rows: list) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    out = Path(tempfile.mkdtemp()) / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), out, row_group_size=16)
    return out.read_bytes()


def sharegpt_dataset_files() -> dict:
    """A dataset as the Hub's Parquet conversion publishes one: the train split in two Parquet
    shards (data/train-0000N-of-00002.parquet), a test split in one; ShareGPT conversations."""
    lines = (ROOT / "examples/default/train.jsonl").read_text().splitlines()
    rows = [sharegpt(json.loads(l)) for l in lines if l.strip()]
    held_out = [sharegpt(json.loads(l)) for l in
                (ROOT / "examples/default/validation.jsonl").read_text().splitlines() if l.strip()]
    half = len(rows) // 2
    return {"data/train-00000-of-00002.parquet": parquet_bytes(rows[:half]),
            "data/train-00001-of-00002.parquet": parquet_bytes(rows[half:]),
            "data/test-00000-of-00001.parquet": parquet_bytes(held_out),
            "README.md": b"# ShareGPT-style conversations\n"}


def subset_dataset_files() -> dict:
    """Subsets declared in the README's `configs` (Alpaca records): `en` with JSON Lines train and
    validation splits, `fr` (the default) with a JSON array per file."""
    alpaca = [{"instruction": f"Say {i} in words", "input": "" if i % 2 else f"n={i}", "output": f"number {i}"}
              for i in range(12)]
    readme = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train.jsonl
  - split: validation
    path: en/dev.jsonl
- config_name: fr
  default: true
  data_files: fr/*.json
---
# Alpaca records in two subsets
"""
    return {"en/train.jsonl": "".join(json.dumps(r) + "\n" for r in alpaca[:8]).encode(),
            "en/dev.jsonl": "".join(json.dumps(r) + "\n" for r in alpaca[8:]).encode(),
            "fr/a.json": json.dumps(alpaca[:3]).encode(), "fr/b.json": json.dumps(alpaca[3:5]).encode(),
            "README.md": readme.encode()}


class Servers:
    """olah and moto on free ports, for the whole run."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="kubetune-fetch-test-"))
        mirrors = self.dir / "mirrors"
        git_repo(mirrors / "models/kubetune/tiny-llama", tiny_model_files())
        git_repo(mirrors / "datasets/kubetune/chat",
                 {"data/train.jsonl": (ROOT / "examples/default/train.jsonl").read_bytes(),
                  "README.md": b"# chat\n"})
        git_repo(mirrors / "datasets/kubetune/sharegpt", sharegpt_dataset_files())
        git_repo(mirrors / "datasets/kubetune/subsets", subset_dataset_files())
        git_repo(mirrors / "datasets/kubetune/tabular", {  # splits named by their files
            "train.csv": b"prompt,completion\nTwo plus two?,Four.\n\"Say \"\"hi\"\"\",hi\n",
            "test.csv": b"prompt,completion\nOne plus one?,Two.\n", "README.md": b"# sums\n"})
        self.hf_port, self.s3_port, self.s3_auth_port = free_port(), free_port(), free_port()
        (self.dir / "olah.toml").write_text(f"""
[basic]
host = "127.0.0.1"
port = {self.hf_port}
mirror-netloc = "127.0.0.1:{self.hf_port}"
mirror-lfs-netloc = "127.0.0.1:{self.hf_port}"
repos-path = "{self.dir / 'olah-repos'}"
mirrors-path = ["{mirrors}"]
[accessibility]
offline = true
""")
        self.procs = []
        self.start("olah", [str(BIN / "olah-cli"), "-c", str(self.dir / "olah.toml")], self.hf_port)
        self.start("moto", [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.s3_port)],
                   self.s3_port)
        # A second S3 server that checks credentials from its first request (moto's IAM mode).
        self.start("moto-auth", [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p",
                                 str(self.s3_auth_port)], self.s3_auth_port,
                   {"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
        self.hf = f"http://127.0.0.1:{self.hf_port}"
        self.s3 = f"http://127.0.0.1:{self.s3_port}"
        self.fill_bucket()

    def start(self, name, cmd, port, env=None):
        log = self.dir / f"{name}.log"
        proc = subprocess.Popen(cmd, cwd=self.dir, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)
        self.procs.append(proc)
        wait_for(port, name, proc, log)

    def s3_client(self):
        return boto3.client("s3", endpoint_url=self.s3, aws_access_key_id="test",
                            aws_secret_access_key="test", region_name="us-east-1")

    def fill_bucket(self):
        s3 = self.s3_client()
        s3.create_bucket(Bucket="kubetune-data")
        big = self.dir / "shards.bin"
        big.write_bytes(os.urandom(96 << 20))
        # multipart, 8 MiB parts: its ETag is the MD5 of the parts' MD5s
        s3.upload_file(str(big), "kubetune-data", "chat/v1/shards.bin",
                       Config=TransferConfig(multipart_threshold=8 << 20,
                                             multipart_chunksize=8 << 20))
        s3.put_object(Bucket="kubetune-data", Key="chat/v1/train.jsonl",
                      Body=(ROOT / "examples/default/train.jsonl").read_bytes(),
                      ChecksumAlgorithm="SHA256")
        s3.put_object(Bucket="kubetune-data", Key="chat/v1/validation.jsonl",
                      Body=(ROOT / "examples/default/validation.jsonl").read_bytes())

    def stop(self):
        for p in self.procs:
            os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            p.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


SERVERS: Servers = None


def same_tree(a: Path, b: Path, ignore=(".kubetune-complete.json",)) -> list:
    """Files that differ between two folders (names or bytes); [] when byte-identical."""
    def files(d):
        return sorted(str(p.relative_to(d)) for p in d.rglob("*")
                      if p.is_file() and p.name not in ignore and ".cache" not in p.parts)
    fa, fb = files(a), files(b)
    if fa != fb:
        return [f"names differ: {fa} vs {fb}"]
    return [f for f in fa if not filecmp.cmp(a / f, b / f, shallow=False)]


class FetchTest(unittest.TestCase):
    def setUp(self):
        self.cache = Path(tempfile.mkdtemp(prefix="kubetune-fetch-cache-"))
        self.env = {**os.environ, "PYTHONPATH": str(ROOT / "fetch"), "HF_ENDPOINT": SERVERS.hf,
                    "HF_HUB_DISABLE_TELEMETRY": "1", "AWS_ENDPOINT_URL": SERVERS.s3,
                    "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                    "AWS_REGION": "us-east-1", "KUBETUNE_FETCH_FIRST_RETRY_SECONDS": "0.05"}
        self.env.pop("HF_TOKEN", None)

    def tearDown(self):
        shutil.rmtree(self.cache, ignore_errors=True)

    def fetch(self, *sources, env=None, check=True, **popen):
        p = subprocess.run([sys.executable, "-m", "kubetune_fetch", "--cache", str(self.cache),
                            *sources], env={**self.env, **(env or {})}, capture_output=True,
                           text=True, timeout=300, **popen)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def results(self, p):
        return [json.loads(line) for line in p.stdout.splitlines()]

    def refused(self, source: str, *texts: str):
        """The fetch of `source` exits 2 (retrying cannot help) with each of `texts` in its log."""
        p = self.fetch(source, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        for text in texts:
            self.assertIn(text, p.stderr)
        return p

    def rows(self, source: str) -> list:
        """The records of a fetched data source (its JSONL path)."""
        (got,) = self.results(self.fetch(source))
        return [json.loads(l) for l in Path(got["path"]).read_text(encoding="utf-8").splitlines()]

    # --- the Hub, through olah ---------------------------------------------------------------

    def test_model_is_what_snapshot_download_gets(self):
        (got,) = self.results(self.fetch("hf://kubetune/tiny-llama"))
        reference = Path(snapshot_download("kubetune/tiny-llama", cache_dir=self.cache / "ref",
                                           allow_patterns=list(MODEL_FILES), endpoint=SERVERS.hf))
        # snapshot_download's patterns also match nested paths; the trainer reads only the top.
        for nested in [p for p in reference.rglob("*") if p.is_file() and p.parent != reference]:
            nested.unlink()
        self.assertEqual(same_tree(Path(got["path"]), reference), [])
        names = {p.name for p in Path(got["path"]).iterdir()}
        self.assertIn("model.safetensors", names)
        self.assertIn("tokenizer.json", names)
        for unwanted in ("pytorch_model.bin", "original", "README.md"):
            self.assertNotIn(unwanted, names)
        self.assertEqual(len(got["revision"]), 40)  # the commit the branch resolved to
        self.assertFalse(got["cached"])
        manifest = json.loads((Path(got["path"]) / ".kubetune-complete.json").read_text())
        self.assertIn("git-blob-sha1", manifest["files"]["config.json"])

    def test_second_fetch_and_a_pinned_revision_hit_the_cache(self):
        (first,) = self.results(self.fetch("hf://kubetune/tiny-llama"))
        p = self.fetch("hf://kubetune/tiny-llama", f"hf://kubetune/tiny-llama@{first['revision']}",
                       "hf://kubetune/tiny-llama@v1")
        for again in self.results(p):
            self.assertTrue(again["cached"], again)
            self.assertEqual(again["path"], first["path"])
        self.assertIn("nothing to download", p.stderr)

    def test_dataset_file_is_what_hf_hub_download_gets(self):
        (got,) = self.results(self.fetch("hf://datasets/kubetune/chat/data/train.jsonl"))
        reference = hf_hub_download("kubetune/chat", "data/train.jsonl", repo_type="dataset",
                                    cache_dir=self.cache / "ref", endpoint=SERVERS.hf)
        self.assertTrue(got["path"].endswith("/data/train.jsonl"))
        self.assertTrue(filecmp.cmp(got["path"], reference, shallow=False))

    def test_two_files_of_one_dataset_repository(self):
        p = self.fetch("hf://datasets/kubetune/chat/data/train.jsonl",
                       "hf://datasets/kubetune/chat/README.md")
        train, readme = self.results(p)
        self.assertFalse(readme["cached"])  # another file: not the first one's cache entry
        self.assertEqual(Path(train["path"]).read_bytes(),
                         (ROOT / "examples/default/train.jsonl").read_bytes())
        self.assertEqual(Path(readme["path"]).read_bytes(), b"# chat\n")

    def test_a_key_that_would_leave_the_cache_is_refused(self):
        SERVERS.s3_client().put_object(Bucket="kubetune-data", Key="evil/a/../../../../escape.txt",
                                       Body=b"x")
        p = self.fetch("s3://kubetune-data/evil", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("would leave the cache folder", p.stderr)
        self.assertEqual(list(self.cache.parent.glob("escape.txt")), [])
        p = self.fetch("s3://kubetune-data/chat/../evil", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)

    def test_hub_errors_name_the_repository_and_the_reason(self):
        p = self.fetch("hf://kubetune/no-such-model", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("model repository kubetune/no-such-model", p.stderr)
        self.assertRegex(p.stderr, r"unauthorised \(401\)|not found \(404\)")
        self.refused("hf://kubetune/tiny-llama@no-such-branch", "no-such-branch")
        self.refused("hf://datasets/kubetune/chat/data/missing.jsonl", "missing.jsonl")
        self.refused("hf://kubetune", "expected hf://ORG/NAME[@REVISION]")

    def test_a_dead_hub_is_retried_then_exit_3(self):
        p = self.fetch("hf://kubetune/tiny-llama", env={"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"},
                       check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("retrying", p.stderr)
        self.assertIn("failed 5 times", p.stderr)

    # --- S3, through moto ----------------------------------------------------------------------

    def boto3_copy(self, prefix: str) -> Path:
        out = self.cache / "boto3"
        s3 = SERVERS.s3_client()
        for o in s3.list_objects_v2(Bucket="kubetune-data", Prefix=prefix)["Contents"]:
            target = out / o["Key"][len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file("kubetune-data", o["Key"], str(target))
        return out

    def test_prefix_is_what_boto3_gets(self):
        (got,) = self.results(self.fetch("s3://kubetune-data/chat/v1"))
        self.assertEqual(same_tree(Path(got["path"]), self.boto3_copy("chat/v1/")), [])
        manifest = json.loads((Path(got["path"]) / ".kubetune-complete.json").read_text())
        self.assertTrue(manifest["files"]["shards.bin"]["etag"].endswith("-12"))  # 96 MiB / 8 MiB
        self.assertIn("sha256", manifest["files"]["train.jsonl"])
        self.assertIn("etag", manifest["files"]["validation.jsonl"])
        (again,) = self.results(self.fetch("s3://kubetune-data/chat/v1/"))
        self.assertTrue(again["cached"])

    def test_one_object_is_a_file(self):
        (got,) = self.results(self.fetch("s3://kubetune-data/chat/v1/train.jsonl"))
        self.assertTrue(got["path"].endswith("/train.jsonl"))
        self.assertEqual(Path(got["path"]).read_bytes(),
                         (ROOT / "examples/default/train.jsonl").read_bytes())

    def partial_of(self, name: str):
        parts = list(self.cache.rglob(f"*.partial/{name}.part"))
        return parts[0] if parts else None

    def test_a_killed_fetch_resumes_and_is_never_taken_for_whole(self):
        cmd = [sys.executable, "-m", "kubetune_fetch", "--cache", str(self.cache), "--workers", "1",
               "s3://kubetune-data/chat/v1"]
        slow = {**self.env, "KUBETUNE_FETCH_TEST_BYTES_PER_SECOND": str(32 << 20)}  # 3 s for 96 MiB
        proc = subprocess.Popen(cmd, env=slow, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            part = self.partial_of("shards.bin")
            if part and part.stat().st_size > (8 << 20):
                break
            time.sleep(0.005)
        proc.kill()
        proc.wait()
        part = self.partial_of("shards.bin")
        self.assertIsNotNone(part, "the fetch was not under way after 60 s")
        self.assertLess(part.stat().st_size, 96 << 20)
        killed_at = part.stat().st_size
        self.assertEqual(list(self.cache.rglob(".kubetune-complete.json")), [])  # not whole
        p = self.fetch("s3://kubetune-data/chat/v1")
        (got,) = self.results(p)
        self.assertFalse(got["cached"])
        self.assertIn(f"shards.bin: resuming at byte {killed_at}", p.stderr)
        self.assertEqual(same_tree(Path(got["path"]), self.boto3_copy("chat/v1/")), [])

    def test_a_corrupted_byte_is_refused(self):
        # What a kill leaves, with one byte flipped (a bad disk, a bad resume): the rest is
        # appended, the whole does not match S3's ETag, the file is removed and the exit says retry.
        first = self.fetch("s3://kubetune-data/chat/v1")
        (good,) = self.results(first)
        whole = Path(good["path"])
        partial = whole.with_name(whole.name + ".partial")
        partial.mkdir()
        data = bytearray((whole / "shards.bin").read_bytes()[: 50 << 20])
        data[12345] ^= 0xFF
        (partial / "shards.bin.part").write_bytes(data)
        shutil.rmtree(whole)
        p = self.fetch("s3://kubetune-data/chat/v1", check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("shards.bin does not match the checksum S3 publishes", p.stderr)
        self.assertFalse((partial / "shards.bin").exists())
        (again,) = self.results(self.fetch("s3://kubetune-data/chat/v1"))
        self.assertEqual(same_tree(Path(again["path"]), self.boto3_copy("chat/v1/")), [])

    def test_s3_errors_are_named(self):
        p = self.fetch("s3://no-such-bucket/x", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no-such-bucket", p.stderr)
        p = self.fetch("s3://kubetune-data/nothing/here", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no object at or under", p.stderr)
        p = self.fetch("s3://kubetune-data/chat/v1",
                       env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{SERVERS.s3_auth_port}",
                            "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG1",
                            "AWS_SECRET_ACCESS_KEY": "not-the-secret"}, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("access denied", p.stderr)
        self.assertNotIn("not-the-secret", p.stderr + p.stdout)  # credentials are never printed
        p = self.fetch("s3://Bad_Bucket/x", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("expected s3://BUCKET/PREFIX", p.stderr)

    def test_parquet_is_handed_on_as_the_rows_datasets_reads(self):
        """A Parquet object (two row groups, ShareGPT conversations as a list of structs, a date)
        arrives as JSONL whose records are the rows Hugging Face datasets reads from the same
        file; fetched again, the cached JSONL; a binary column is refused by name."""
        import datasets
        import pyarrow as pa
        import pyarrow.parquet as pq
        rows = [{"conversations": [{"from": "human", "value": f"q{i} é"}, {"from": "gpt", "value": f"a{i}"}],
                 "score": i / 3, "day": __import__("datetime").date(2026, 1, 1 + i % 28)} for i in range(300)]
        local = self.cache.parent / f"{self.cache.name}-train.parquet"
        pq.write_table(pa.Table.from_pylist(rows), local, row_group_size=128)
        SERVERS.s3_client().upload_file(str(local), "kubetune-data", "parquet/train.parquet")
        (got,) = self.results(self.fetch("s3://kubetune-data/parquet/train.parquet"))
        self.assertTrue(got["path"].endswith("/train.parquet.jsonl"), got)
        ours = [json.loads(l) for l in Path(got["path"]).read_text(encoding="utf-8").splitlines()]
        theirs = datasets.load_dataset("parquet", data_files=str(local), split="train",
                                       cache_dir=str(self.cache / "hf-datasets")).to_list()
        self.assertEqual(len(ours), 300)
        for a, b in zip(ours, theirs):
            self.assertEqual(a["conversations"], b["conversations"])
            self.assertEqual(a["score"], b["score"])
            self.assertEqual(a["day"], str(b["day"]))
        (again,) = self.results(self.fetch("s3://kubetune-data/parquet/train.parquet"))
        self.assertTrue(again["cached"])
        self.assertEqual(again["path"], got["path"])
        pq.write_table(pa.Table.from_pylist([{"image": b"\x89PNG", "text": "x"}]), local)
        SERVERS.s3_client().upload_file(str(local), "kubetune-data", "parquet/images.parquet")
        p = self.fetch("s3://kubetune-data/parquet/images.parquet", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("image hold binary data", p.stderr)
        local.unlink()

    def _load_dataset(self, repo: str, split: str, subset: str = None) -> list:
        """The reference: datasets.load_dataset from the same server (in a process of its own, as
        huggingface_hub reads HF_ENDPOINT once, at import)."""
        code = ("import datasets, json, sys; r = datasets.load_dataset(sys.argv[1], sys.argv[2] or None, "
                "split=sys.argv[3], cache_dir=sys.argv[4]).to_list(); print(json.dumps(r))")
        p = subprocess.run([sys.executable, "-c", code, repo, subset or "", split, str(self.cache / "hf-datasets")],
                           env=self.env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, f"load_dataset({repo!r}, {subset!r}, split={split!r}): {p.stderr[-3000:]}")
        return json.loads(p.stdout.splitlines()[-1])

    def test_a_split_of_parquet_shards_is_what_load_dataset_reads(self):
        """hf://datasets/ORG/NAME?split=SPLIT: the files datasets makes the split of (two Parquet
        shards for train, one for test), fetched and verified one by one, handed on as one JSONL
        whose records are the rows datasets.load_dataset reads from the same server, in its order;
        the log counts each shard's records; a second fetch, and a pinned one, hit the cache."""
        first = self.fetch("hf://datasets/kubetune/sharegpt?split=train", "hf://datasets/kubetune/sharegpt?split=test")
        (train, test) = self.results(first)
        self.assertIn("data/train-00001-of-00002.parquet:", first.stderr)
        for got, split in ((train, "train"), (test, "test")):
            ours = [json.loads(l) for l in Path(got["path"]).read_text(encoding="utf-8").splitlines()]
            theirs = self._load_dataset("kubetune/sharegpt", split)
            self.assertEqual(ours, theirs, split)
            self.assertGreater(len(ours), 1)
        p = self.fetch("hf://datasets/kubetune/sharegpt?split=train")
        self.assertIn("in the cache", p.stderr)
        pinned = self.fetch("--pin", f"hf://datasets/kubetune/sharegpt?split=train={train['revision']}",
                            "hf://datasets/kubetune/sharegpt?split=train",
                            env={"HF_ENDPOINT": "http://127.0.0.1:9"})  # no Hub: from the cache alone
        self.assertEqual(self.results(pinned)[0]["path"], train["path"])

    def test_subsets_from_the_readme_are_what_load_dataset_reads(self):
        """The README's `configs` decide a subset's files: JSON Lines splits of `en`, JSON arrays
        of `fr` (the default, when no subset is named), each equal to load_dataset(repo, subset, split=...); a split or subset the
        dataset does not have is refused (exit 2) with the ones it has."""
        for subset, split in (("en", "train"), ("en", "validation"), ("fr", "train"), (None, "train")):
            subset_arg = f"&subset={subset}" if subset else ""  # none: the README's default, fr
            self.assertEqual(self.rows(f"hf://datasets/kubetune/subsets?split={split}{subset_arg}"),
                             self._load_dataset("kubetune/subsets", split, subset), (subset, split))
        for split in ("train", "test"):  # CSV files whose names are their splits
            self.assertEqual(self.rows(f"hf://datasets/kubetune/tabular?split={split}"),
                             self._load_dataset("kubetune/tabular", split), split)
        self.refused("hf://datasets/kubetune/subsets?split=test&subset=en",
                     "has no split 'test'; its splits: train, validation")
        self.refused("hf://datasets/kubetune/subsets?split=train&subset=de", "'de'")
        # The Hub answers 401 for what it will not name.
        self.refused("hf://datasets/kubetune/no-such-dataset?split=train",
                     "dataset repository kubetune/no-such-dataset")

    def test_a_dead_endpoint_is_retried_then_exit_3(self):
        p = self.fetch("s3://kubetune-data/chat/v1",
                       env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
                            "AWS_MAX_ATTEMPTS": "1"}, check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("failed 5 times", p.stderr)

    def test_progress_file_says_how_far(self):
        progress = self.cache / "progress.json"
        self.fetch("--progress-file", str(progress), "s3://kubetune-data/chat/v1")
        state = json.loads(progress.read_text())
        self.assertTrue(state["done"])
        self.assertEqual(state["bytes"], state["totalBytes"])
        self.assertGreater(state["totalBytes"], 96 << 20)

    # --- how pods use it: links, pins, results ------------------------------------------------

    def test_links_pins_and_results(self):
        links, results = self.cache / "links", self.cache / "results.json"
        p = self.fetch("--link-dir", str(links), "--results", str(results),
                       "model=hf://kubetune/tiny-llama", "train=s3://kubetune-data/chat/v1/train.jsonl")
        self.assertTrue((links / "model" / "config.json").is_file())
        self.assertEqual((links / "train").read_bytes(),
                         (ROOT / "examples/default/train.jsonl").read_bytes())
        reported = json.loads(results.read_text())
        self.assertEqual([r["source"] for r in reported],
                         ["hf://kubetune/tiny-llama", "s3://kubetune-data/chat/v1/train.jsonl"])
        commit, digest = reported[0]["revision"], reported[1]["revision"]
        # A worker pinned to the preflight's commit reads the cache without asking the Hub: here
        # the Hub is unreachable and the fetch still succeeds.
        dead_hub = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
        p = self.fetch("--pin", f"hf://kubetune/tiny-llama={commit}", "hf://kubetune/tiny-llama",
                       env=dead_hub)
        self.assertTrue(self.results(p)[0]["cached"])
        # Objects that changed since the preflight are refused, not silently used.
        p = self.fetch("--pin", "s3://kubetune-data/chat/v1/train.jsonl=0123456789abcdef",
                       "s3://kubetune-data/chat/v1/train.jsonl", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"changed since they were first fetched for this job (revision "
                      f"0123456789abcdef, now {digest})", p.stderr)

    def test_sources_are_accepted_as_the_crd_accepts_them(self):
        """parse_source (this tool) and the CRD's CEL rules (written from common/source_forms.h),
        run by cel-python, accept and refuse the same sources."""
        crd = yaml.safe_load((ROOT / "charts/kubetune/crds/finetunejobs.yaml").read_text())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        env = celpy.Environment()

        def crd_accepts(where: str, obj: dict) -> bool:
            for rule in spec["properties"][where].get("x-kubernetes-validations", []):
                program = env.program(env.compile(rule["rule"]))
                if not bool(program.evaluate({"self": celpy.json_to_cel(obj)})):
                    return False
            return True

        def tool_accepts(text: str, model: bool) -> bool:
            try:
                source = parse_source(text)
            except FetchError:
                return False
            if isinstance(source, S3Source):
                return True
            return (source.repo_type == "model") == model

        candidates = [
            "hf://meta-llama/Llama-3.2-1B", "hf://meta-llama/Llama-3.2-1B@main",
            "hf://org/name@0123456789abcdef0123456789abcdef01234567", "hf://org/name@refs/pr/1",
            "hf://org", "hf://org/name/extra", "hf://-org/name", "hf://org/na me", "hf://org/name@",
            "hf://datasets/org/chat/data/train.jsonl", "hf://datasets/org/chat/train.jsonl@v2",
            "hf://datasets/org/chat", "hf://datasets/org/chat/../x.jsonl",
            "hf://datasets/org/chat/a@b/c.jsonl", "hf://datasets/org/chat//x.jsonl",
            "hf://datasets/org/chat/x.jsonl\n", "s3://bucket/x\n", "s3://bucket/a/../b",
            "s3://bucket/key", "s3://bucket",
            "s3://my.bucket-1/a/b/c.jsonl", "s3://Bucket/x", "s3://ab/x", "s3://bucket_1/x", "s3://",
            # near misses: the CRD refuses them as the tool does, not as local paths
            "HF://org/name", "Hf://org/name", "hf:/org/name", "hf:org/name", "hf:///org/name",
            "hf://org/", "hf:///name", "S3://bucket/x", "s3:/bucket/x", "s3:///bucket/x",
            "hf://datasets//chat/x.jsonl", "HF://datasets/org/chat/x.jsonl",
            # a dataset's split
            "hf://datasets/org/chat?split=train", "hf://datasets/org/chat@v2?split=test",
            "hf://datasets/org/chat?split=train_prefs&subset=en", "hf://datasets/org/chat?split=",
            "hf://datasets/org/chat?subset=en&split=train", "hf://datasets/org/chat?split=a b",
            "hf://datasets/org/chat?split=train&subset=", "hf://datasets/org/chat/x.jsonl?split=train",
            "hf://datasets/org/chat?split=..", "hf://org/chat?split=train",
        ]
        for text in candidates:
            self.assertEqual(crd_accepts("model", {"path": text}), tool_accepts(text, True),
                             f"model.path {text}")
            self.assertEqual(crd_accepts("data", {"train": text}), tool_accepts(text, False),
                             f"data.train {text}")

    # --- publish: a run's output to S3 ----------------------------------------------------------

    def output_folder(self, host: str = None) -> Path:
        """What a LoRA run leaves: the adapter, a merged model big enough for three parts,
        checkpoints (never uploaded) and the trainer's completion marker."""
        out = self.cache / "output"
        (out / "merged").mkdir(parents=True)
        (out / "checkpoints" / "step-3").mkdir(parents=True)
        (out / "adapter_config.json").write_text('{"r": 8}')
        (out / "adapter_model.safetensors").write_bytes(os.urandom(3000))
        (out / "merged" / "config.json").write_text("{}")
        (out / "merged" / "model.safetensors").write_bytes(os.urandom(40 << 20))
        (out / "checkpoints" / "step-3" / "optimizer.safetensors").write_bytes(b"x" * 100)
        (out / "kubetune-complete.json").write_text(
            json.dumps({"host": host or socket.gethostname(), "step": 3}))
        return out

    def publish(self, out: Path, *args, env=None, check=True, **popen):
        p = subprocess.run([sys.executable, "-m", "kubetune_fetch", "publish", str(out), *args],
                           env={**self.env, **(env or {})}, capture_output=True, text=True,
                           timeout=300, **popen)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def uploaded(self, bucket: str, prefix: str) -> Path:
        """The prefix as boto3 downloads it."""
        out = self.cache / f"boto3-{bucket}"
        shutil.rmtree(out, ignore_errors=True)
        s3 = SERVERS.s3_client()
        for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
            target = out / o["Key"][len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, o["Key"], str(target))
        return out

    def new_bucket(self) -> str:
        name = f"out-{time.time_ns()}"
        SERVERS.s3_client().create_bucket(Bucket=name)
        return name

    def test_publish_uploads_every_file_checked_and_the_marker_last(self):
        out, bucket = self.output_folder(), self.new_bucket()
        p = self.publish(out, "--to", f"s3://{bucket}/runs/a", "--results", str(self.cache / "r"))
        got = self.uploaded(bucket, "runs/a/")
        marker = json.loads((got / "kubetune-complete.json").read_text())
        (got / "kubetune-complete.json").unlink()
        shutil.rmtree(out / "checkpoints")
        (out / "kubetune-complete.json").unlink()
        self.assertEqual(same_tree(got, out), [])  # byte-identical, checkpoints left out
        self.assertEqual(marker["step"], 3)
        self.assertEqual(sorted(marker["files"]), ["adapter_config.json",
                                                   "adapter_model.safetensors",
                                                   "merged/config.json", "merged/model.safetensors"])
        big = marker["files"]["merged/model.safetensors"]
        self.assertEqual(big["sha256"], hashlib.sha256((out / "merged/model.safetensors")
                                                       .read_bytes()).hexdigest())
        self.assertTrue(big["etag"].endswith("-3"), big)  # three 16 MiB parts
        # The marker was written last (S3 times objects to the second: ties are allowed).
        objects = SERVERS.s3_client().list_objects_v2(Bucket=bucket, Prefix="runs/a/")["Contents"]
        times = {o["Key"]: o["LastModified"] for o in objects}
        marker_time = times.pop("runs/a/kubetune-complete.json")
        self.assertGreaterEqual(marker_time, max(times.values()))
        self.assertEqual(json.loads(p.stdout), json.loads((self.cache / "r").read_text()))
        self.assertEqual(json.loads(p.stdout), [
            {"name": "adapter", "uri": f"s3://{bucket}/runs/a/"},
            {"name": "merged", "uri": f"s3://{bucket}/runs/a/merged/"}])
        again = self.publish(out.parent / "output", "--to", f"s3://{bucket}/runs/a")
        self.assertIn("merged/model.safetensors is there already", again.stderr)

    def test_a_killed_upload_resumes_and_is_never_taken_for_whole(self):
        out, bucket = self.output_folder(), self.new_bucket()
        slow = {**self.env, "KUBETUNE_PUBLISH_TEST_SECONDS_PER_PART": "2"}
        proc = subprocess.Popen([sys.executable, "-m", "kubetune_fetch", "publish", str(out),
                                 "--to", f"s3://{bucket}/r"], env=slow,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        s3 = SERVERS.s3_client()
        deadline, parts = time.time() + 60, []
        while time.time() < deadline and not parts:
            for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                parts = s3.list_parts(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"]).get(
                    "Parts", [])
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        self.assertTrue(parts, "no part was uploaded within 60 s")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        self.assertNotIn("r/kubetune-complete.json", keys)  # not whole
        self.assertNotIn("r/merged/model.safetensors", keys)
        p = self.publish(out, "--to", f"s3://{bucket}/r")
        self.assertRegex(p.stderr, r"merged/model.safetensors: resumed an interrupted upload, "
                                   r"[12] of 3 parts were there already")
        got = self.uploaded(bucket, "r/")
        self.assertEqual((got / "merged/model.safetensors").read_bytes(),
                         (out / "merged/model.safetensors").read_bytes())
        self.assertEqual(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []), [])

    def test_a_part_damaged_on_the_way_is_sent_again_or_the_upload_fails(self):
        out, bucket = self.output_folder(), self.new_bucket()
        p = self.publish(out, "--to", f"s3://{bucket}/r",
                         env={"KUBETUNE_PUBLISH_TEST_CORRUPT_PARTS": "2"})
        self.assertIn("S3 received other bytes than were sent", p.stderr)
        got = self.uploaded(bucket, "r/")
        self.assertEqual(same_tree(got / "merged", out / "merged"), [])
        # Damaged every time: exit 3 (retry), and no marker.
        bucket = self.new_bucket()
        p = self.publish(out, "--to", f"s3://{bucket}/r", check=False,
                         env={"KUBETUNE_PUBLISH_TEST_CORRUPT_PARTS": "1000"})
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("arrived damaged 3 times", p.stderr)
        self.assertFalse((self.uploaded(bucket, "r/") / "kubetune-complete.json").exists())

    def test_publish_errors_are_named(self):
        out = self.output_folder()
        p = self.publish(out, "--to", "s3://no-such-bucket/r", "--results", str(self.cache / "r"),
                         check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no-such-bucket", (self.cache / "r").read_text())
        auth = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{SERVERS.s3_auth_port}"}
        p = self.publish(out, "--to", "s3://kubetune-data/r", env=auth, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("access denied", p.stderr)
        shutil.rmtree(out / "merged")
        p = self.publish(out, "--gguf", "q8_0", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("output.gguf needs a model folder", p.stderr)

    def test_publish_waits_for_this_hosts_trainer(self):
        out, bucket = self.output_folder(host="an-earlier-pod"), self.new_bucket()
        proc = subprocess.Popen([sys.executable, "-m", "kubetune_fetch", "publish", str(out),
                                 "--wait-for-trainer", "--to", f"s3://{bucket}/r"], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        self.assertIsNone(proc.poll(), "took an earlier run's marker for this one's")
        self.assertNotIn("Contents", SERVERS.s3_client().list_objects_v2(Bucket=bucket))
        (out / "kubetune-complete.json").write_text(
            json.dumps({"host": socket.gethostname(), "step": 7}))
        stdout, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, stderr)
        self.assertIn("the trainer finished (step 7)", stderr)
        marker = json.loads((self.uploaded(bucket, "r/") / "kubetune-complete.json").read_text())
        self.assertEqual(marker["step"], 7)

    # --- checkpoints in S3 ------------------------------------------------------------------

    @staticmethod
    def write_checkpoint(local: Path, step: int) -> Path:
        """A checkpoint as the trainer leaves it: renamed into place with its state file."""
        ck = local / f"step-{step:08d}"
        ck.mkdir(parents=True)
        (ck / "trainable-00000-of-00001.safetensors").write_bytes(os.urandom(20 << 20))
        (ck / "adapter_config.json").write_text('{"r": 8}')
        (ck / "trainer_state.json").write_text(json.dumps({"step": step}))
        return ck

    def remote_steps(self, bucket: str, whole: bool = True) -> list:
        """The checkpoints under ck/ in S3 (whole: those with their marker)."""
        prefix = "ck/"
        keys = [o["Key"] for o in SERVERS.s3_client().list_objects_v2(
            Bucket=bucket, Prefix=prefix).get("Contents", [])]
        return sorted({k[len(prefix):].split("/")[0] for k in keys
                       if not whole or k.endswith("/kubetune-complete.json")})

    def test_checkpoints_are_uploaded_as_they_appear_and_pruned_to_keep_last(self):
        out, local, bucket = self.cache / "out", self.cache / "ck", self.new_bucket()
        out.mkdir()
        self.write_checkpoint(local, 2)
        (local / ".step-00000004.tmp").mkdir()  # being written: not a checkpoint yet
        proc = subprocess.Popen([sys.executable, "-m", "kubetune_fetch", "publish", str(out),
                                 "--wait-for-trainer", "--sync-checkpoints", str(local),
                                 "--checkpoints-to", f"s3://{bucket}/ck", "--keep-last", "2"],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        def until(what, predicate):
            deadline = time.time() + 60
            while time.time() < deadline and not predicate():
                time.sleep(0.1)
            self.assertTrue(predicate(), what)
        until("step 2 in S3", lambda: self.remote_steps(bucket) == ["step-00000002"])
        self.write_checkpoint(local, 4)
        self.write_checkpoint(local, 6)
        until("steps 4 and 6 in S3, 2 removed",
              lambda: self.remote_steps(bucket, whole=False) == ["step-00000004", "step-00000006"])
        self.assertEqual(self.remote_steps(bucket), ["step-00000004", "step-00000006"])
        (out / "kubetune-complete.json").write_text(json.dumps({"host": socket.gethostname(),
                                                                "step": 6}))
        _, stderr = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, stderr)
        self.assertIn("removed step-00000002 (checkpoint.keepLast 2)", stderr)

    def restore(self, bucket: str, local: Path, check=True):
        p = self.fetch("--restore-checkpoint", f"s3://{bucket}/ck={local}", check=check)
        return p

    def test_the_newest_whole_checkpoint_is_restored_and_checked(self):
        bucket, source = self.new_bucket(), self.cache / "source"
        p = self.restore(bucket, self.cache / "empty")
        self.assertIn("no checkpoint yet", p.stderr)
        self.assertFalse((self.cache / "empty").exists() and any((self.cache / "empty").iterdir()))
        for step in (2, 4):
            self.write_checkpoint(source, step)
        out = self.cache / "out"
        out.mkdir()
        (out / "kubetune-complete.json").write_text(json.dumps({"step": 4}))
        self.publish(out, "--sync-checkpoints", str(source), "--checkpoints-to", f"s3://{bucket}/ck")
        # A newer checkpoint whose upload was cut short (no marker) is not taken.
        s3 = SERVERS.s3_client()
        s3.put_object(Bucket=bucket, Key="ck/step-00000006/trainer_state.json", Body=b'{"step": 6}')
        local = self.cache / "restored"
        p = self.restore(bucket, local)
        self.assertEqual([c.name for c in local.iterdir()], ["step-00000004"])
        self.assertEqual(same_tree(local / "step-00000004", source / "step-00000004"), [])
        self.assertIn("restored step-00000004", p.stderr)
        # A file changed in S3 since its marker was written: refused, nothing left half-restored.
        s3.put_object(Bucket=bucket, Key="ck/step-00000004/adapter_config.json", Body=b"{}")
        elsewhere = self.cache / "elsewhere"
        p = self.restore(bucket, elsewhere, check=False)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("step-00000004/adapter_config.json does not match the SHA-256", p.stderr)
        self.assertEqual([c.name for c in elsewhere.iterdir()], [])

    def default_model(self) -> Path:
        """The tiny model of examples/default, made by the trainer."""
        base = self.cache / "base-model"
        subprocess.run([f"{BIN_DIR}/kubetune-trainer", "init-model", "--config",
                        str(ROOT / "examples/default/model_config.json"), "--tokenizer",
                        str(ROOT / "examples/default/tokenizer"), "--out", str(base), "--seed", "0"],
                       check=True, capture_output=True)
        return base

    def kubetune_run(self, job: Path, **env) -> subprocess.CompletedProcess:
        """`kubetune run JOB` with this checkout's kubetune-fetch and the servers' endpoints."""
        wrapper = self.cache / "kubetune-fetch"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m kubetune_fetch \"$@\"\n")
        wrapper.chmod(0o755)
        env = {**self.env, "KUBETUNE_TRAINER": f"{BIN_DIR}/kubetune-trainer",
               "KUBETUNE_FETCH": str(wrapper), "KUBETUNE_SOURCE_CACHE": str(self.cache / "sources"),
               **env}
        return subprocess.run([f"{BIN_DIR}/kubetune", "run", str(job)], env=env,
                              capture_output=True, text=True, timeout=900)

    @unittest.skipUnless(BIN_DIR, "kubetune and kubetune-trainer not built (KUBETUNE_BIN_DIR)")
    def test_a_job_with_s3_checkpoints_resumes_on_another_machine(self):
        """checkpoint.dir s3://: a run's checkpoints are uploaded; the same job run again from an
        empty work folder (another machine, another cluster) restores the newest and resumes from
        its step instead of starting over."""
        base = self.default_model()
        bucket = self.new_bucket()
        def run(max_steps: int, home: str):
            job = self.cache / "job.yaml"
            job.write_text(f"""apiVersion: kubetune.io/v1alpha1
kind: FineTuneJob
metadata: {{name: resumed}}
spec:
  model: {{path: "{base}"}}
  data: {{train: "{ROOT / 'examples/default/train.jsonl'}", maxLength: 64}}
  training: {{maxSteps: {max_steps}, microBatchSize: 2, logEverySteps: 1}}
  output: {{dir: "s3://{bucket}/run"}}
  checkpoint: {{dir: "s3://{bucket}/ck", everySteps: 2, keepLast: 2}}
  workers: {{replicas: 1, gpusPerWorker: 0}}
""")
            p = self.kubetune_run(job, HOME=str(self.cache / home))
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            return p.stdout + p.stderr
        first = run(4, "machine-a")
        self.assertIn("no checkpoint yet", first)
        self.assertEqual(self.remote_steps(bucket), ["step-00000002", "step-00000004"])
        second = run(6, "machine-b")
        self.assertIn("restored step-00000004", second)
        self.assertRegex(second, r"resuming from \S*step-00000004 at step=4/6")
        self.assertNotIn("step=1/", second)  # nothing trained twice
        self.assertEqual(self.remote_steps(bucket), ["step-00000004", "step-00000006"])
        marker = json.loads(SERVERS.s3_client().get_object(
            Bucket=bucket, Key="run/kubetune-complete.json")["Body"].read())
        self.assertEqual(marker["step"], 6)

    @unittest.skipUnless(BIN_DIR, "kubetune and kubetune-trainer not built (KUBETUNE_BIN_DIR)")
    def test_kubetune_run_from_a_hub_split_to_s3_with_a_gguf_llama_cpp_scores(self):
        """Issue 49's whole path: a FineTuneJob trains a tiny Qwen2 (Qwen2's real tokenizer) from
        the Hub with LoRA on a ShareGPT dataset's split of Parquet shards, merges it and writes a
        q8_0 GGUF to S3; from what boto3 downloads, llama.cpp scores held-out text with the GGUF
        within q8_0's tolerance of the merged model in transformers."""
        os.environ.setdefault("KUBETUNE_TRAINER", f"{BIN_DIR}/kubetune-trainer")
        os.environ.setdefault("KUBETUNE_REPO", str(ROOT))
        sys.path.insert(0, str(ROOT / "tests" / "train"))
        import exports_test as ex  # the GGUF scoring of tests/train, and its tolerances
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            self.skipTest("llama-cpp-python is not installed (scripts/setup.sh --test installs it)")
        if not (ex.llama_cpp_home() / "convert_hf_to_gguf.py").is_file():
            self.skipTest(f"no llama.cpp converter at {ex.llama_cpp_home()}")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        base = ex.qwen2_with_a_real_tokenizer(self.cache / "qwen2")
        mirror = SERVERS.dir / "mirrors/models/kubetune/tiny-qwen2"
        if not mirror.exists():
            git_repo(mirror, {f.name: f.read_bytes() for f in base.iterdir() if f.is_file()})
        bucket = self.new_bucket()
        job = self.cache / "job.yaml"
        job.write_text(f"""apiVersion: kubetune.io/v1alpha1
kind: FineTuneJob
metadata: {{name: to-s3}}
spec:
  model: {{path: "hf://kubetune/tiny-qwen2", dtype: float32}}
  data: {{train: "hf://datasets/kubetune/sharegpt?split=train", format: sharegpt, maxLength: 128,
          lossOn: all}}
  method: {{type: lora, lora: {{targetModules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
                                                down_proj]}}}}
  training: {{maxSteps: 8, microBatchSize: 4, learningRate: 0.03, logEverySteps: 4}}
  output: {{dir: "s3://{bucket}/qwen/v1", saveMerged: true, gguf: [q8_0]}}
  workers: {{replicas: 1, gpusPerWorker: 0}}
""")
        p = self.kubetune_run(job, KUBETUNE_LLAMA_CPP=str(ex.llama_cpp_home()),
                              HOME=str(self.cache / "home"))
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
        self.assertIn(f"output gguf-q8_0: s3://{bucket}/qwen/v1/gguf/model-q8_0.gguf", p.stdout)
        self.assertIn(f"output merged: s3://{bucket}/qwen/v1/merged/", p.stdout)

        got = self.uploaded(bucket, "qwen/v1/")
        marker = json.loads((got / "kubetune-complete.json").read_text())
        self.assertEqual(marker["step"], 8)
        for name in ("adapter_model.safetensors", "merged/config.json", "gguf/model-q8_0.gguf"):
            self.assertEqual(marker["files"][name]["sha256"],
                             hashlib.sha256((got / name).read_bytes()).hexdigest(), name)
        self.assertFalse((got / "checkpoints").exists())

        tok = AutoTokenizer.from_pretrained(got / "merged")
        ids = ex.held_out_ids(tok, ex.HELD_OUT)[:-1]
        merged = ex.hf_loss(AutoModelForCausalLM.from_pretrained(got / "merged", dtype=torch.float32), ids)
        start = ex.hf_loss(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), ids)
        gguf = ex.llama_cpp_loss(got / "gguf/model-q8_0.gguf", ids)
        print(f"held-out loss: base {start:.4f}, merged {merged:.4f} (transformers), "
              f"q8_0 {gguf:.4f} (llama.cpp)", file=sys.stderr)
        self.assertLess(abs(gguf - merged), ex.GGUF_TOLERANCE["q8_0"])
        self.assertGreater(abs(start - merged), 5 * ex.GGUF_TOLERANCE["q8_0"])

    @unittest.skipUnless(BIN_DIR, "kubetune and kubetune-trainer not built (KUBETUNE_BIN_DIR)")
    def test_kubetune_run_trains_from_the_hub_and_s3(self):
        """`kubetune run` fetches an hf:// model, a dataset's split of ShareGPT Parquet shards
        (hf://datasets/...?split=train) and s3:// data into the cache on this machine, as the
        preflight pod does, and trains from them; a second run downloads nothing."""
        base = self.default_model()
        mirror = SERVERS.dir / "mirrors/models/kubetune/default-base"
        if not mirror.exists():
            git_repo(mirror, {f.name: f.read_bytes() for f in base.iterdir() if f.is_file()})
        validation = [sharegpt(json.loads(l)) for l in
                      (ROOT / "examples/default/validation.jsonl").read_text().splitlines() if l.strip()]
        SERVERS.s3_client().put_object(Bucket="kubetune-data", Key="default/validation.jsonl",
                                       Body="".join(json.dumps(r) + "\n" for r in validation).encode())
        out = self.cache / "run"
        job = self.cache / "job.yaml"
        job.write_text(f"""apiVersion: kubetune.io/v1alpha1
kind: FineTuneJob
metadata: {{name: fetched}}
spec:
  model: {{path: "hf://kubetune/default-base"}}
  data:
    train: "hf://datasets/kubetune/sharegpt?split=train"
    validation: "s3://kubetune-data/default/validation.jsonl"
    format: sharegpt
    maxLength: 64
  method: {{type: full}}
  training: {{maxSteps: 3, microBatchSize: 4, logEverySteps: 1}}
  output: {{dir: "{out}/output"}}
  workers: {{replicas: 1, gpusPerWorker: 0}}
  volumes: [{{name: work, mountPath: "{out}", hostPath: {{path: "{out}"}}}}]
""")
        for run in (1, 2):
            p = self.kubetune_run(job)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertTrue((out / "output" / "model.safetensors").is_file()
                            or any((out / "output").glob("*.safetensors")), p.stdout[-2000:])
            if run == 2:
                self.assertIn("hf://kubetune/default-base: in the cache", p.stderr)
                self.assertIn("s3://kubetune-data/default/validation.jsonl: in the cache", p.stderr)
                self.assertIn("hf://datasets/kubetune/sharegpt?split=train: in the cache", p.stderr)
            else:
                self.assertIn("records from 2 file(s)", p.stderr)
        self.assertTrue(any((self.cache / "sources/hf/models/kubetune/default-base").glob(
            "*/.kubetune-complete.json")))


if __name__ == "__main__":
    SERVERS = Servers()
    try:
        unittest.main(argv=[sys.argv[0], "-v", *sys.argv[1:]])
    finally:
        SERVERS.stop()
