"""Turning raw builder parameters (CLI strings, YAML values) into a validated model.

pydantic does the checking; this module only turns its first complaint into one
InputError line that names the builder, the field, the value and what is allowed.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import InputError

M = TypeVar("M", bound=BaseModel)


class Params(BaseModel):
    """Base of every builder's parameters: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def parse_params(model: type[M], builder: str, raw: dict[str, Any]) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise input_error(exc, model, builder) from None


def input_error(exc: ValidationError, model: type[BaseModel], builder: str) -> InputError:
    """pydantic's first complaint as one InputError line."""
    err = exc.errors()[0]
    fld = ".".join(str(p) for p in err["loc"]) or "?"
    allowed = ", ".join(sorted(model.model_fields))
    if err["type"] == "extra_forbidden":
        return InputError(f"{builder}: unknown parameter", f"use one of: {allowed}", field=fld,
                          value=err.get("input"))
    bound = err.get("ctx") or {}
    hint = {
        "greater_than_equal": f"use a value >= {bound.get('ge')}",
        "less_than_equal": f"use a value <= {bound.get('le')}",
        "greater_than": f"use a value > {bound.get('gt')}",
    }.get(err["type"], f"give a valid value ({err['msg']})")
    return InputError(f"{builder}: {err['msg'].lower()}", hint, field=fld, value=err.get("input"))
