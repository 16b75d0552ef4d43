"""Experiments: the spec (YAML -> validated model), its jobs, failure schedules, the runner, measurements and
the results folder with plots and provenance."""

from .spec import Experiment, load

__all__ = ["Experiment", "load"]
