"""Reading JSON-lines files (datasets, observed actions, replay caches)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of ``path``; a line that is not JSON
    raises ValueError naming the file and the line."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {lineno}: not JSON ({exc.msg})") from exc
