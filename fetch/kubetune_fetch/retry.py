"""Retries with exponential back-off for what the network or a server's 5xx may cure; any other
failure is reported at once."""
import os
import time
from typing import Callable, Optional, TypeVar

from .errors import EXIT_RETRYABLE, FetchError

T = TypeVar("T")
ATTEMPTS = 5
# The first back-off; doubles each time (1, 2, 4, 8 s). Tests make it short.
FIRST_DELAY = float(os.environ.get("KUBETUNE_FETCH_FIRST_RETRY_SECONDS", "1"))


def status_of(e: BaseException) -> Optional[int]:
    """The HTTP status an error of huggingface_hub or botocore carries, if any."""
    response = getattr(e, "response", None)
    code = getattr(response, "status_code", None)
    if code is None and isinstance(response, dict):  # botocore's ClientError
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code


_TRANSIENT_NAMES = ("Connect", "Timeout", "ReadError", "RemoteProtocol", "ResponseStreaming",
                    "IncompleteRead", "ProtocolError", "ChunkedEncoding")


def _transient_alone(e: BaseException) -> bool:
    code = status_of(e)
    if code is not None:
        return code >= 500 or code == 429
    names = " ".join(c.__name__ for c in type(e).__mro__)
    return isinstance(e, (ConnectionError, TimeoutError)) or any(
        word in names for word in _TRANSIENT_NAMES)


def is_transient(e: BaseException) -> bool:
    """The error, or one it was raised from (huggingface_hub wraps a dropped connection during a
    download in LocalEntryNotFoundError), is one the network or an overloaded server may cure."""
    seen = 0
    while e is not None and seen < 8:
        if _transient_alone(e):
            return True
        e = e.__cause__ or e.__context__
        seen += 1
    return False


def with_retries(source: str, what: str, call: Callable[[], T], log: Callable[[str], None]) -> T:
    delay = FIRST_DELAY
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - classified below
            if not is_transient(e):
                raise
            if attempt == ATTEMPTS:
                raise FetchError(source, f"{what} failed {ATTEMPTS} times, last: "
                                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                                 EXIT_RETRYABLE) from e
            log(f"{source}: {what} failed ({type(e).__name__}), retrying in {delay:.0f}s "
                f"({attempt}/{ATTEMPTS - 1})")
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")
