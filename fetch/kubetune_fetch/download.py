"""Downloading a source's files, the part the Hub and S3 share: `workers` at a time, each retried
while its error is one the network may cure (retry.py), any other explained in one line, with the
progress of the bytes arriving in the partial folder."""
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from .errors import FetchError
from .progress import Progress, directory_bytes
from .retry import with_retries

T = TypeVar("T")


def download_all(source: str, items: Iterable[T], name_of: Callable[[T], str],
                 fetch_one: Callable[[T], object], explain: Callable[[Exception], FetchError],
                 partial: Path, total: int, log: Callable[[str], None], progress_file: Path,
                 workers: int) -> None:
    def one(item: T) -> None:
        try:
            with_retries(source, f"downloading {name_of(item)}", lambda: fetch_one(item), log)
        except FetchError:
            raise
        except Exception as e:  # noqa: BLE001 - every client error becomes one clear line
            raise explain(e) from e

    with Progress(source, total, lambda: directory_bytes(partial), log, progress_file):
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, items))
