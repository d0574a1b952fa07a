from dataclasses import asdict, dataclass


@dataclass
class Fetched:
    """One source, fetched: where it is now. Printed as one JSON line per source."""

    source: str
    path: str  # the folder (a model, an S3 prefix) or the file (a dataset file, an S3 object)
    revision: str  # the commit or the digest of the objects' ETags it was resolved to
    cached: bool  # True: it was already in the cache, nothing was downloaded
    bytes: int

    def as_dict(self) -> dict:
        return asdict(self)
