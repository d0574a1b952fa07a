"""One split of a Hub dataset, hf://datasets/ORG/NAME[@REVISION]?split=SPLIT[&subset=SUBSET], as
the one JSONL file the trainer reads.

Which files make up a split is the datasets library's decision (the README's `configs`, and its
conventions for names: data/train-00000-of-00002.parquet, train/, test.csv, ...). It is asked, not
imitated: load_dataset_builder resolves the subset's data files at the commit, and nothing else of
it is used. Each file is then fetched as any one file of a dataset is (hub.py: verified, cached,
resumed), its rows read (Parquet with pyarrow, as parquet.py; JSON Lines; a JSON array; CSV and
Arrow with pyarrow) and written, in the order datasets reads them, into one JSONL, atomically. The
log says how many records each file gave; so does the cache entry's manifest.
"""
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .errors import EXIT_USER_ERROR, FetchError
from .parquet import is_parquet, iter_rows, json_line
from .result import Fetched
from .retry import with_retries
from .sources import HubSource

ROWS = "rows.jsonl"


def split_files(source: HubSource, commit: str, cache_root: Path) -> list:
    """The repository paths of the split's files, in datasets' order."""
    import datasets  # imported when needed: heavy, and only this form uses it

    cache_root.mkdir(parents=True, exist_ok=True)  # a first fetch into an empty cache
    with tempfile.TemporaryDirectory(prefix=".datasets-", dir=cache_root) as scratch:
        try:
            builder = datasets.load_dataset_builder(source.repo_id, source.subset, revision=commit,
                                                    cache_dir=scratch)
        except ValueError as e:  # an unknown subset: datasets names the ones there are
            raise FetchError(source.text, str(e).splitlines()[0], exit_code=EXIT_USER_ERROR) from None
    data_files = builder.config.data_files or {}
    if source.split not in data_files:
        subset = f" (subset {builder.config.name})" if source.subset else ""
        raise FetchError(source.text, f"{source.repo_id}@{commit[:12]}{subset} has no split "
                                      f"{source.split!r}; its splits: {', '.join(sorted(data_files))}",
                         exit_code=EXIT_USER_ERROR)
    paths = []
    for url in data_files[source.split]:
        m = re.match(rf"^hf://datasets/{re.escape(source.repo_id)}@[0-9a-f]+/(.+)$", str(url))
        if not m:
            raise FetchError(source.text, f"datasets resolved a file outside the repository: {url}")
        paths.append(m[1])
    return paths


def records(path: Path, name: str) -> Iterator[dict]:
    """A data file's rows, read as datasets reads its kind (by the name's extension)."""
    if is_parquet(path):
        yield from iter_rows(path)
    elif name.endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as f:
            head = f.read(1 << 16).lstrip()
            f.seek(0)
            if head.startswith("["):  # one JSON array of records
                yield from json.load(f)
                return
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as e:
                        raise FetchError(name, f"line {n}: not JSON: {e.msg}",
                                         exit_code=EXIT_USER_ERROR) from None
    elif name.endswith((".csv", ".arrow")):
        import pyarrow.csv
        import pyarrow.ipc

        table = pyarrow.csv.read_csv(path) if name.endswith(".csv") else pyarrow.ipc.open_stream(path).read_all()
        yield from table.to_pylist()
    else:
        raise FetchError(name, "a data file of a kind the trainer cannot be given (Parquet, JSON, "
                               "JSON Lines, CSV and Arrow are)", exit_code=EXIT_USER_ERROR)


def _cached(source: HubSource, entry, commit: str) -> Fetched:
    rows = entry.path / ROWS
    return Fetched(source.text, str(rows), commit, True, rows.stat().st_size)


def fetch_split(source: HubSource, cache_root: Path, log: Callable[[str], None],
                progress_file: Path = None, workers: int = 8, pin: str = None) -> Fetched:
    from huggingface_hub import HfApi

    from .hub import cache_entry, explain, fetch_hub

    try:
        commit = pin or with_retries(
            source.text, "resolving the revision",
            lambda: HfApi(token=os.environ.get("HF_TOKEN") or None).dataset_info(
                source.repo_id, revision=source.revision).sha, log)
        entry = cache_entry(cache_root, source, commit)
        if entry.complete():
            log(f"{source.text}: in the cache ({commit[:12]}), nothing to download")
            return _cached(source, entry, commit)
        paths = with_retries(source.text, "resolving the split's files",
                             lambda: split_files(source, commit, cache_root), log)
    except FetchError:
        raise
    except Exception as e:  # noqa: BLE001 - not found, gated, unauthorised: one clear line
        raise explain(source, e) from e
    log(f"{source.text}: split {source.split} of {source.repo_id}@{commit[:12]} is {len(paths)} file(s)")
    fetched = []
    for path in paths:
        one = HubSource(f"hf://datasets/{source.repo_id}/{path}@{commit}", "dataset", source.repo_id,
                        commit, path)
        fetched.append((path, Path(fetch_hub(one, cache_root, log, progress_file, workers, commit).path)))
    with entry.locked():
        if entry.complete():
            return _cached(source, entry, commit)
        shutil.rmtree(entry.partial, ignore_errors=True)
        entry.partial.mkdir(parents=True)
        counts, digest = {}, hashlib.sha256()
        with open(entry.partial / ROWS, "w", encoding="utf-8") as out:
            for path, local in fetched:
                counts[path] = 0
                for record in records(local, path):
                    line = json_line(record)
                    out.write(line)
                    digest.update(line.encode())
                    counts[path] += 1
                log(f"{source.text}: {path}: {counts[path]} records")
        size = (entry.partial / ROWS).stat().st_size
        log(f"{source.text}: {sum(counts.values())} records from {len(counts)} file(s)")
        entry.finish({"source": source.text, "revision": commit, "records": counts,
                      "files": {ROWS: {"size": size, "sha256": digest.hexdigest()}}})
    return Fetched(source.text, str(entry.path / ROWS), commit, False, size)
