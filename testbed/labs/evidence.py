"""What a lab checker looks at: the student's answers, the pictures and files they made, the runs they did.

Everything a student produces goes into one work folder (`lab-work/` by
default): `labN.yaml` with the answers, pictures, an edited policy. Runs are the
results folders `hpnlab run` leaves in `results/`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from testbed.schema.results import Run, load
from topos.errors import InputError
from topos.inputs import load_yaml, read_head, read_text


@dataclass
class Check:
    name: str
    ok: bool
    hint: str = ""  # what to do when it did not pass


@dataclass
class Evidence:
    workdir: Path
    results: Path = field(default_factory=lambda: Path("results"))

    def answers(self, lab: int) -> dict:
        path = self.workdir / f"lab{lab}.yaml"
        if not path.exists():
            return {}
        data = load_yaml(read_text(path, "answers", max_bytes=1 << 20), "answers") or {}
        if not isinstance(data, dict):
            raise InputError(f"{path} must hold 'key: value' lines", "start again from 'hpnlab lab start'",
                             field="answers", value=str(path))
        return data

    def latest_run(self, experiment: str) -> StudentRun | None:
        """The newest run of an experiment (quick runs count), typed; a record that is not one hpnlab wrote (a
        run killed while writing it, a file edited by hand) is no evidence, and no reason to stop the check."""
        runs = []
        for p in sorted(self.results.glob(f"*-{experiment}*/results.json")):
            try:
                data = load(read_text(p, "results.json"))
            except (InputError, ValueError):
                continue
            if data.experiment.get("name") == experiment:
                runs.append(StudentRun(p.parent, data.runs))
        return runs[-1] if runs else None


@dataclass
class StudentRun:
    """A results folder a student's run left, and its runs."""

    dir: Path
    runs: list[Run]

    @property
    def name(self) -> str:
        return self.dir.name

    def variants(self) -> dict[str, list[Run]]:
        """The runs of each variant, in the order they ran."""
        out: dict[str, list[Run]] = {}
        for r in self.runs:
            out.setdefault(r.variant, []).append(r)
        return out


def number(answers: dict, key: str) -> float | None:
    """The answer as a finite number ("47%" is 0.47), or None: a number too large for a float is no answer."""
    v = answers.get(key)
    if isinstance(v, bool):
        return None
    try:
        if isinstance(v, (int, float)):
            x = float(v)
        else:
            text = str(v).strip()
            x = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def answer_check(answers: dict, key: str, want, close: float = 0.0, how: str = "") -> Check:
    """The student's answer to one question against what the checker computed or measured."""
    got = answers.get(key)
    if got is None:
        return Check(f"answer '{key}'", False, f"fill in '{key}' in your answers file{how and ' (' + how + ')'}")
    if isinstance(want, bool):
        ok = str(got).strip().lower() in (("yes", "true") if want else ("no", "false"))
    elif isinstance(want, (int, float)):
        g = number(answers, key)
        ok = g is not None and abs(g - want) <= close
    else:
        ok = str(got).strip().lower() == str(want).lower()
    return Check(f"answer '{key}'", ok, "" if ok else f"'{got}' is not what the network shows; {how}")


def png_check(path: Path, how: str) -> Check:
    """A PNG by its first 8 bytes, read from a regular file only (a student's path may name a device, a FIFO or
    a folder)."""
    ok = read_head(path, 8) == b"\x89PNG\r\n\x1a\n"
    return Check(f"picture {path}", ok, "" if ok else f"{path} is missing or not a PNG: {how}")
