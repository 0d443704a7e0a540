"""The one exception type of the generator.

Every user-facing failure is a CarveError carrying where it happened (a file,
``file:line``, a manifest field or a tensor key), what went wrong, and an
optional hint. The CLI prints ``str(err)`` on one line and exits 1; a
traceback is shown only with ``-v``.
"""

from __future__ import annotations


class CarveError(Exception):
    """A user-facing error: ``<location>: <message> (hint: <hint>)``."""

    def __init__(self, message: str, location: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text
