"""hf:// sources, through huggingface_hub (the Hub's official client): the revision resolved to a
commit, only the files the trainer reads, each checked against the Hub's published checksum."""
import fnmatch
import json
import os
import shutil
from pathlib import Path
from typing import Callable

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub import errors as hub_errors

from . import verify
from .cache import COMMIT, MARKER, CacheEntry, check_free_space, safe_relative
from .errors import EXIT_RETRYABLE, FetchError
from .download import download_all
from .result import Fetched
from .retry import status_of, with_retries
from .sources import HubSource

# What the trainer reads of a model repository (trainer/io, text): weights, configs,
# tokenizer, chat template. Top-level only: `original/` holds the same weights in another format,
# and `*.bin`/`*.pth` are pickles of the same tensors.
MODEL_FILES = ("*.safetensors", "*.safetensors.index.json", "config.json",
               "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja", "chat_template.json")

# huggingface_hub keeps its resume state here inside a download folder; not part of the result.
_HUB_STATE = ".cache"


def wanted_model_file(path: str) -> bool:
    return "/" not in path and any(fnmatch.fnmatch(path, p) for p in MODEL_FILES)


def explain(source: HubSource, e: Exception) -> FetchError:
    """A client error as one line naming the repository and the reason."""
    kind = "dataset" if source.repo_type == "dataset" else "model"
    if isinstance(e, hub_errors.GatedRepoError):
        return FetchError(source.text, f"the {kind} repository {source.repo_id} is gated: accept its "
                                       "terms on the Hub and give a token that may read it (HF_TOKEN)")
    if isinstance(e, hub_errors.RevisionNotFoundError):
        return FetchError(source.text, f"revision {source.revision!r} not found in {source.repo_id}")
    if isinstance(e, (hub_errors.EntryNotFoundError, hub_errors.RemoteEntryNotFoundError)) and \
            source.path is not None:
        return FetchError(source.text, f"no file {source.path!r} in {source.repo_id}@{source.revision}")
    code = status_of(e)
    if isinstance(e, hub_errors.RepositoryNotFoundError) or code in (401, 403, 404):
        why = {401: "unauthorised (401)", 403: "forbidden (403)"}.get(code, "not found (404)")
        token = "with the token in HF_TOKEN" if os.environ.get("HF_TOKEN") else "without a token"
        return FetchError(source.text, f"{kind} repository {source.repo_id}: {why} {token}; a private "
                                       "or gated repository needs a token that may read it")
    return FetchError(source.text, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def _expected_checksum(entry) -> tuple:
    lfs = getattr(entry, "lfs", None)
    if lfs:
        sha = lfs["sha256"] if isinstance(lfs, dict) else lfs.sha256
        return "sha256", sha
    return "git-blob-sha1", entry.blob_id


def _matches(path: Path, kind: str, expected: str) -> bool:
    actual = verify.sha256_hex(path) if kind == "sha256" else verify.git_blob_sha1(path)
    return actual == expected


def _pinned(source: HubSource, commit: str) -> HubSource:
    return HubSource(source.text, source.repo_type, source.repo_id, commit, source.path)


def cache_entry(cache_root: Path, source: HubSource, commit: str) -> CacheEntry:
    """A model repository's files at a commit; a dataset file at a commit, one entry per file (two
    files of one dataset repository, train and validation, are two fetches); a dataset's split at
    a commit (its rows as one JSONL, dataset_split.py)."""
    if not COMMIT.match(commit):
        raise FetchError(source.text, f"the Hub answered commit {commit!r}, which is not a commit sha")
    org, name = source.repo_id.split("/")
    parts = ["hf", f"{source.repo_type}s", org, name]
    if source.path is not None:
        parts += [commit, str(safe_relative(source.text, source.path)).replace("/", "--")]
    elif source.split is not None:
        parts += [commit, f"{source.subset or 'default'}--{source.split}.split"]
    return CacheEntry(cache_root, parts, commit)


def _drop_stale_downloads(partial: Path) -> None:
    """huggingface_hub (2.4) restarts a file killed mid-way from its first byte, under a new
    temporary name: the old one is of no use, and would count as progress and as space."""
    for stale in (partial / _HUB_STATE).rglob("*.incomplete") if partial.exists() else []:
        stale.unlink(missing_ok=True)


def fetch_hub(source: HubSource, cache_root: Path, log: Callable[[str], None],
              progress_file: Path = None, workers: int = 8, pin: str = None) -> Fetched:
    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    kind = source.repo_type
    if pin:
        # The commit the preflight resolved: asked for by its sha, and when the cache holds it,
        # nothing is asked of the Hub at all (a worker starts without the network).
        source = _pinned(source, pin)
        entry = cache_entry(cache_root, source, pin)
        if entry.complete():
            manifest = json.loads((entry.path / MARKER).read_text())
            log(f"{source.text}: in the cache ({pin[:12]}), nothing to download")
            path = entry.path / source.path if source.path else entry.path
            return Fetched(source.text, str(path), pin, True,
                           sum(f["size"] for f in manifest["files"].values()))
    try:
        info = with_retries(source.text, "resolving the revision",
                            lambda: api.repo_info(source.repo_id, repo_type=kind,
                                                  revision=source.revision), log)
        commit = info.sha
        if source.path is None:
            tree = with_retries(source.text, "listing the repository",
                                lambda: list(api.list_repo_tree(source.repo_id, repo_type=kind,
                                                                revision=commit, recursive=True,
                                                                expand=True)), log)
            files = [f for f in tree if hasattr(f, "size") and wanted_model_file(f.path)]
            if not any(f.path.endswith(".safetensors") for f in files):
                raise FetchError(source.text, f"{source.repo_id}@{commit[:12]} has no *.safetensors "
                                              "weights at its top level (the trainer reads only those)")
        else:
            files = with_retries(source.text, "reading the file's metadata",
                                 lambda: api.get_paths_info(source.repo_id, [source.path],
                                                            repo_type=kind, revision=commit,
                                                            expand=True), log)
            files = [f for f in files if hasattr(f, "size")]
            if not files:
                raise FetchError(source.text, f"no file {source.path!r} in {source.repo_id}@"
                                              f"{source.revision}")
    except FetchError:
        raise
    except Exception as e:  # noqa: BLE001 - every client error becomes one clear line
        raise explain(source, e) from e

    entry = cache_entry(cache_root, source, commit)
    result_path = lambda base: base / source.path if source.path else base  # noqa: E731
    with entry.locked():
        total = sum(f.size for f in files)
        if entry.complete():
            log(f"{source.text}: in the cache ({commit[:12]}), nothing to download")
            return Fetched(source.text, str(result_path(entry.path)), commit, True, total)
        _drop_stale_downloads(entry.partial)
        have = sum((entry.partial / f.path).stat().st_size for f in files
                   if (entry.partial / f.path).is_file())
        check_free_space(source.text, entry.dir, total - have)
        log(f"{source.text}: {len(files)} files of {source.repo_id}@{commit[:12]}")

        download_all(source.text, files, lambda f: f.path,
                     lambda f: hf_hub_download(source.repo_id, f.path, repo_type=kind,
                                               revision=commit, local_dir=entry.partial,
                                               token=os.environ.get("HF_TOKEN") or None),
                     lambda e: explain(source, e), entry.partial, total, log, progress_file,
                     workers)
        manifest = {"source": source.text, "revision": commit, "files": {}}
        for f in files:
            local = entry.partial / safe_relative(source.text, f.path)
            kind_of_sum, expected = _expected_checksum(f)
            if local.stat().st_size != f.size or not _matches(local, kind_of_sum, expected):
                local.unlink()
                raise FetchError(source.text, f"{f.path} does not match the checksum the Hub "
                                              f"publishes ({kind_of_sum} {expected}); removed, fetch "
                                              "again", exit_code=EXIT_RETRYABLE)
            manifest["files"][f.path] = {"size": f.size, kind_of_sum: expected}
        state = entry.partial / _HUB_STATE
        if state.exists():
            shutil.rmtree(state)
        entry.finish(manifest)
    return Fetched(source.text, str(result_path(entry.path)), commit, False, total)
