"""The `hpnlab` command line: thin commands over library calls. Nothing outside this package imports it."""

from .main import cli, main

__all__ = ["cli", "main"]
