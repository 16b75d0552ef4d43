"""Benchmarks write their tables into the READMEs between markers, so every figure there is generated, never typed.

A block is delimited by `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`; what is between them is
replaced whole, the rest of the file is left as it is.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def replace_block(path: Path, name: str, block: str) -> None:
    """Put `block` between the markers named `name` in `path`."""
    start, end = markers(name)
    text = path.read_text()
    if start not in text or end not in text or text.index(end) < text.index(start):
        raise SystemExit(f"{path}: no '{start}' ... '{end}' block to write into; add the two markers where the "
                         "table belongs")
    path.write_text(text[:text.index(start)] + f"{start}\n{block}\n{end}" + text[text.index(end) + len(end):])


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
