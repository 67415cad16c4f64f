"""The one exception type the CLI turns into a one-line message and exit code 2."""


class ForensicsError(Exception):
    """A user-facing failure: bad input, wrong database, missing tool."""
