"""The one error type for bad input and unmet preconditions.

It lives in the lowest layer (topos) so that every layer above can raise it;
the CLI turns it into a single line on stderr and exit code 2, before anything
touched the system.
"""

from __future__ import annotations

import functools


class InputError(Exception):
    """Bad input or an unmet precondition, with the fix spelled out."""

    exit_code = 2

    def __init__(self, what: str, fix: str | None = None, *, field: str | None = None, value: object = None):
        self.what = what
        self.fix = fix
        self.field = field
        self.value = value
        super().__init__(self.line())

    def hide_value(self) -> None:
        """The value came from a file: the line shows its type, never what the file holds."""
        if self.value is not None and not isinstance(self.value, FromFile):
            self.value = FromFile(self.value)
            self.args = (self.line(),)

    def line(self) -> str:
        value = repr(self.value)
        if len(value) > 80:  # one line, whatever the input was
            value = value[:77] + "..."
        head = f"{self.field}={value}: " if self.field is not None else ""
        tail = f"; fix: {self.fix}" if self.fix else ""
        return f"{head}{self.what}{tail}"


class FromFile:
    """A value read from a file, in an error line: its type only. The file may be one only root can read (hpnlab
    run through sudo), so what it holds is never echoed."""

    __slots__ = ("kind",)

    def __init__(self, value: object):
        self.kind = type(value).__name__

    def __repr__(self) -> str:
        return f"<{self.kind} from the file>"


def hides_values(load):
    """For a function that reads the file at its first argument: an error's value that is not that path itself
    comes from the file, and is shown by its type only."""

    @functools.wraps(load)
    def wrapper(path, *args, **kw):
        try:
            return load(path, *args, **kw)
        except InputError as exc:
            if exc.value != str(path):
                exc.hide_value()
            raise

    return wrapper
