"""What every part of an experiment file's schema shares: strict models, the one error a field validator
raises, names that become folder names, and the bounds of time."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from topos.errors import InputError

DAY_S = 86_400.0
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # becomes part of folder names: no '/', no leading '.'
Name = Annotated[str, Field(pattern=NAME_PATTERN, description="letters, digits, '.', '_', '-'; at most 64")]
NAME_FIX = "use letters, digits, '.', '_' and '-' (at most 64, not starting with '.' or '-')"


class FieldError(ValueError):
    """An InputError raised inside a field validator, so pydantic adds where the field is."""

    def __init__(self, error: InputError):
        super().__init__(error.what)
        self.error = error


class Strict(BaseModel):
    # strict: 5.0 or true is not a count and "5" is not a number; finite: .inf is no horizon
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
