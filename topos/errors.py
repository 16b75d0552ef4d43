"""The one error type for bad input and unmet preconditions.

It lives in the lowest layer (topos) so that every layer above can raise it;
the CLI turns it into a single line on stderr and exit code 2, before anything
touched the system.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input or an unmet precondition, with the fix spelled out."""

    exit_code = 2

    def __init__(self, what: str, fix: str | None = None, *, field: str | None = None, value: object = None):
        self.what = what
        self.fix = fix
        self.field = field
        self.value = value
        super().__init__(self.line())

    def line(self) -> str:
        value = repr(self.value)
        if len(value) > 80:  # one line, whatever the input was
            value = value[:77] + "..."
        head = f"{self.field}={value}: " if self.field is not None else ""
        tail = f"; fix: {self.fix}" if self.fix else ""
        return f"{head}{self.what}{tail}"
