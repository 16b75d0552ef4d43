"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages' tables are generated from the code at build time.

A page asks for a table with a line `<!-- gen:NAME -->`; the hook replaces it before the page is converted, so
a reference can never drift from what the program does. A missing description (a pydantic field, a REST
handler, an exported name) is an error here, which `mkdocs build --strict` turns into a failed build.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- gen:([a-z-]+) -->$", re.M)


def cell(text: object) -> str:
    """One markdown table cell: pipes escaped, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows])


# -- pydantic models ---------------------------------------------------------------------------------------------
def type_name(ann: object) -> str:
    """A field's type as a reader writes it in YAML."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "mapping"
    names = {str: "text", int: "integer", float: "number", bool: "true or false", typing.Any: "anything"}
    return names.get(ann, getattr(ann, "__name__", str(ann)))


def bounds(field) -> str:
    """A field's limits (ge, le, max_length, ...) in words."""
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}
    out = []
    for m in field.metadata:
        for attr, word in words.items():
            if (v := getattr(m, attr, None)) is not None:
                whole = isinstance(v, int) or float(v).is_integer()
                out.append(f"{word} {int(v):,}" if whole else f"{word} {v:g}")
    return ", ".join(out)


def type_cell(field) -> str:
    """A field's type with its limits, as a table cell says them."""
    extra = bounds(field)
    return type_name(field.annotation) + (f" ({extra})" if extra else "")


def default_value(field, given: object = PydanticUndefined) -> object:
    """A field's default, PydanticUndefined when it is required; `given`: the value the enclosing default holds
    (an experiment's qos defaults to QosSpec(scale="auto"), whatever QosSpec's own default is)."""
    if given is not PydanticUndefined:
        return given
    return field.default_factory() if field.default_factory is not None else field.default


def default_text(value: object) -> str:
    """A default as YAML would say it."""
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump() for v in value]
    return f"`{json.dumps(value)}`"


def description_of(model: type[BaseModel], name: str) -> str:
    """The field's description, or the one of the base class it overrides (a builder that changes a default)."""
    for klass in model.__mro__:
        fields = getattr(klass, "model_fields", {})
        if name in fields and fields[name].description:
            return fields[name].description
    raise ValueError(f"{model.__name__}.{name} has no description: add Field(description=...)")


def nested_models(ann: object) -> list[type[BaseModel]]:
    """The models a field's type holds: itself, or inside a list, a map or a union."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(ann):
        found += [m for m in nested_models(arg) if m not in found]
    return found


def models_under(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The model and every model its fields hold, each once."""
    found = [model]
    for m in found:  # the list grows as it is walked
        for f in m.model_fields.values():
            found += [n for n in nested_models(f.annotation) if n not in found]
    return found


def model_sections(model: type[BaseModel], path: str, seen: dict[type, str], level: int = 2,
                   instance: BaseModel | None = None) -> list[str]:
    """A table of `model`'s keys, then a section per nested model (a model met before is linked, not repeated).
    `instance`: the default the enclosing field gives this model, whose values are the defaults shown."""
    seen[model] = path
    rows, later = [], []
    for name, field in model.model_fields.items():
        if (field.json_schema_extra or {}).get("internal"):
            continue
        key = field.alias or name
        sub = f"{path}.{key}" if path else key
        default = default_value(field, getattr(instance, name) if instance is not None else PydanticUndefined)
        rows.append([f"`{key}`", type_cell(field), default_text(default), description_of(model, name)])
        for m in nested_models(field.annotation):
            inner = default if isinstance(default, m) else None
            later.append((m, sub + ("[]" if typing.get_origin(field.annotation) is list else ""), inner))
    out = [table(["key", "type", "default", "what it does"], rows)]
    for m, sub, inner in later:
        if m in seen:
            out.append(f"\n`{sub}`: the same keys as `{seen[m]}`.")
            continue
        doc = inspect.getdoc(m) if m.__doc__ else ""
        out += ["", f"{'#' * level} `{sub}`", "", *([doc.split("\n\n")[0], ""] if doc else [])]
        out += model_sections(m, sub, seen, level, inner)
    return out


def experiment_reference() -> str:
    from testbed.experiment.spec import Experiment

    return "\n".join(model_sections(Experiment, "", {}))


def topology_reference() -> str:
    from topos import BUILDERS

    out = []
    for b in BUILDERS.values():
        rows = [[f"`{name}`", type_cell(f), default_text(default_value(f)), description_of(b.params, name)]
                for name, f in b.params.model_fields.items()]
        presets = [[f"`{p}`", ", ".join(f"{k}={v}" for k, v in values.items()) or "the defaults"]
                   for p, values in b.presets.items()]
        out += [f"## `{b.name}`", "", b.description, "", table(["parameter", "type", "default", "what it sets"],
                                                                rows),
                "", table(["preset", "parameters"], presets), ""]
    return "\n".join(out)


# -- REST, results.json, the Python API, the layers ---------------------------------------------------------------
def rest_reference() -> str:
    from controllers.rest import _Handler

    rows = []
    for name, fn in vars(_Handler).items():
        verb, _, rest = name.partition("_")
        if verb in ("get", "post", "delete") and rest and not rest.startswith("_"):
            if not fn.__doc__:
                raise ValueError(f"controllers/rest.py: {name} has no docstring")
            rows.append([f"`{verb.upper()} /{rest.replace('_', '/')}`", " ".join(inspect.getdoc(fn).split())])
    return table(["request", "answer"], rows)


def results_reference() -> str:
    from testbed.schema.results import TABLES

    out = []
    for title, fields in TABLES.items():
        out += [f"## {title}", "", table(["key", "what it holds"], [[f"`{k}`", v] for k, v in fields.items()]), ""]
    return "\n".join(out)


def python_reference() -> str:
    """A mkdocstrings block per name `from testbed import ...` gives, where it lives."""
    testbed = importlib.import_module("testbed")
    out = []
    for name in testbed.__all__:
        obj = getattr(testbed, name)
        own = vars(obj).get("__doc__") if isinstance(obj, type) else obj.__doc__  # a class's own, not inherited
        if not own:
            raise ValueError(f"testbed.{name} has no docstring")
        out += [f"::: {testbed._HOMES[name]}.{name}", ""]
    return "\n".join(out)


def layers_reference() -> str:
    """The layers as tests/unit/test_layers.py enforces them, each package with its modules' first lines."""
    tree = ast.parse((ROOT / "tests/unit/test_layers.py").read_text())
    layers = next(ast.literal_eval(n.value) for n in tree.body
                  if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LAYERS")
    rows = []
    for i, layer in enumerate(layers):
        for pkg in layer:
            rows.append([i, f"`{pkg}`", first_line(ROOT / pkg.replace(".", "/") / "__init__.py")])
    return table(["layer (lowest first)", "package", "what it is"], rows)


def first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) if path.is_file() else None
    if not doc:
        raise ValueError(f"{path.relative_to(ROOT)} has no docstring")
    return " ".join(doc.split("\n\n")[0].split())


GENERATORS = {"experiment": experiment_reference, "topologies": topology_reference, "rest": rest_reference,
              "results": results_reference, "python": python_reference, "layers": layers_reference}


def generate(name: str) -> str:
    if name not in GENERATORS:
        raise ValueError(f"<!-- gen:{name} -->: no such generated table; use one of {', '.join(GENERATORS)}")
    return GENERATORS[name]()


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    return MARKER.sub(lambda m: generate(m.group(1)), markdown)
