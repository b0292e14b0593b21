"""Progress bars for long work (commands and benchmarks): shown to a person at a terminal,
silent under ``--quiet`` and when the output goes to a file or a pipe."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

QUIET_HELP = "no progress bar (there is none when the output is not a terminal either)"


def show_progress(quiet: bool = False) -> bool:
    """Whether to draw a progress bar: not under ``quiet``, not into a pipe or file."""
    return not quiet and sys.stderr.isatty()


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    desc: str | None = None,
    unit: str = "it",
    quiet: bool = False,
) -> Any:
    """A ``tqdm`` bar over ``iterable`` (or updated by hand), disabled unless
    :func:`show_progress`."""
    from tqdm.auto import tqdm

    return tqdm(
        iterable, total=total, desc=desc, unit=unit, disable=not show_progress(quiet), leave=False
    )


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` for a benchmark's argument parser."""
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
