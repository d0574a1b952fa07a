"""Parquet, the format most Hub datasets are published in, as the JSONL the trainer reads: one JSON
object per row, columns as fields, nested lists and structs (ShareGPT's conversations, message
lists) as JSON arrays and objects. Done here with Apache Arrow (pyarrow), the well-kept reader,
rather than in the trainer: Debian ships no Arrow C++ library, and the trainer's image carries no
Python. A column JSON cannot hold (binary: images, audio) is refused by name.

`python3 -m kubetune_fetch.parquet FILE.parquet [OUT.jsonl]` converts a local file (OUT defaults to
FILE.parquet.jsonl).
"""
import datetime
import decimal
import json
import os
import sys
from pathlib import Path

from .errors import FetchError


def is_parquet(path: Path) -> bool:
    """A file that starts with Parquet's magic bytes (whatever its name)."""
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _binary_columns(schema) -> list:
    """Columns whose values (or nested values) are raw bytes."""
    import pyarrow.types as t

    def holds_binary(kind) -> bool:
        if t.is_binary(kind) or t.is_large_binary(kind) or t.is_fixed_size_binary(kind):
            return True
        if t.is_list(kind) or t.is_large_list(kind) or t.is_fixed_size_list(kind):
            return holds_binary(kind.value_type)
        if t.is_struct(kind):
            return any(holds_binary(kind.field(i).type) for i in range(kind.num_fields))
        return False
    return [field.name for field in schema if holds_binary(field.type)]


def _plain(value):
    """What json.dumps cannot write by itself: dates and decimals, as text."""
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time, decimal.Decimal)):
        return str(value)
    raise TypeError(f"{type(value).__name__} values cannot be written as JSON")


def iter_rows(source: Path):
    """`source`'s rows as dicts, in file order (binary columns refused by name)."""
    import pyarrow.parquet as pq  # imported when needed: most sources are not Parquet

    try:
        parquet = pq.ParquetFile(source)
    except Exception as e:  # pyarrow's errors name no file
        raise FetchError(str(source), f"not a readable Parquet file: {e}") from None
    binary = _binary_columns(parquet.schema_arrow)
    if binary:
        raise FetchError(str(source), f"column(s) {', '.join(binary)} hold binary data (images, "
                                      "audio), which JSONL records cannot carry")
    for batch in parquet.iter_batches(batch_size=4096):
        yield from batch.to_pylist()


def json_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, default=_plain) + "\n"


def to_jsonl(source: Path, out: Path, log=None) -> int:
    """Writes `source`'s rows to `out` (atomically: a reader sees all of it or none) and returns
    how many there were."""
    tmp = out.with_name(f".{out.name}.tmp")
    rows = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for record in iter_rows(source):
                f.write(json_line(record))
                rows += 1
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    if log:
        log(f"{source.name}: {rows} Parquet rows as JSONL in {out}")
    return rows


def as_jsonl(path: Path, log=None) -> Path:
    """A fetched Parquet file's JSONL, beside it in the cache (made once); other paths as they are."""
    if not is_parquet(path):
        return path
    out = path.with_name(path.name + ".jsonl")
    if not out.exists():
        to_jsonl(path, out, log)
    return out


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 2
    source = Path(args[0])
    out = Path(args[1]) if len(args) == 2 else source.with_name(source.name + ".jsonl")
    try:
        rows = to_jsonl(source, out)
    except FetchError as e:
        print(f"kubetune-fetch parquet: {e}", file=sys.stderr)
        return 2
    print(f"{rows} rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
