"""Reading a YAML or JSON data file (event files, sweep grids) as untrusted input.

Before anything is expanded, :func:`read_data_file` checks the file's size, decodes it as
strict UTF-8, counts its nesting without recursion (JSON: brackets outside strings; YAML:
the parser's event stream) and refuses YAML aliases (``*name``: the "billion laughs" and
self-references); the YAML is then composed by a ``SafeLoader`` subclass that refuses
aliases too. Every problem is a ValueError naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_LOADER: Any = None


def _no_alias_loader() -> Any:
    """A yaml SafeLoader that refuses aliases before composing them (built on first use)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class NoAliasLoader(yaml.SafeLoader):
            def compose_node(self, parent: Any, index: Any) -> Any:
                if self.check_event(yaml.AliasEvent):
                    mark = self.peek_event().start_mark
                    raise yaml.composer.ComposerError(
                        None, None, "aliases (*name) are not allowed", mark
                    )
                return super().compose_node(parent, index)

        _LOADER = NoAliasLoader
    return _LOADER


def json_depth(data: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text (strings skipped), without recursion."""
    code = np.frombuffer(_JSON_STRING.sub(b'""', data), np.uint8)
    step = np.isin(code, (ord("["), ord("{"))).astype(np.int64) - np.isin(
        code, (ord("]"), ord("}"))
    )
    return int(np.cumsum(step).max(initial=0))


def read_data_file(path: str | Path, what: str, *, max_bytes: int, max_depth: int) -> Any:
    """The value in the ``.json`` (else YAML) file ``path``, within the limits above."""
    path = Path(path)

    def fail(why: str) -> ValueError:
        return ValueError(f"{what} {path}: {why}")

    size = path.stat().st_size
    if size > max_bytes:
        raise fail(f"{size} bytes is not allowed: at most {max_bytes}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(f"not UTF-8 text ({err})") from None
    if path.suffix == ".json":
        if json_depth(data) > max_depth:
            raise fail(f"nested more than {max_depth} levels deep")

        def constant(name: str) -> Any:
            raise ValueError(f"{name} is not allowed: a finite number")

        try:
            return json.loads(text, parse_constant=constant)
        except (ValueError, RecursionError) as err:
            raise fail(f"not valid JSON ({err})") from None
    import yaml

    loader = _no_alias_loader()
    try:
        depth = 0
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    raise fail(f"nested more than {max_depth} levels deep")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                raise fail(
                    f"aliases (*{event.anchor}) are not allowed (line {event.start_mark.line + 1})"
                )
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise fail(f"not valid YAML ({err})") from None
    except RecursionError:
        raise fail("nested too deeply") from None
