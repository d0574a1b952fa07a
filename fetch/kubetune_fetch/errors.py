"""Why a fetch failed, and the exit code that says whether retrying can help.

The codes are the trainer's (common/contracts.h: kExitUserError = 2, kExitRetryable = 3), so the
operator's gang policy treats a fetch like any other step of a job.
"""

EXIT_USER_ERROR = 2  # not found, unauthorised, malformed source, disk full: retrying cannot help
EXIT_RETRYABLE = 3  # the network or the server failed, after our own retries


class FetchError(Exception):
    """A failure to report in one line that names the source and the reason."""

    def __init__(self, source: str, reason: str, exit_code: int = EXIT_USER_ERROR):
        super().__init__(f"{source}: {reason}")
        self.exit_code = exit_code
