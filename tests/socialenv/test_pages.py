"""NumPy's huge-page advice inside small_pages and huge_pages: set, nested, restored."""

from __future__ import annotations

import pytest

from socialenv.core import pages

pytestmark = pytest.mark.skipif(
    pages._set_advice is None, reason="this NumPy has no huge-page advice switch"
)


def _advice() -> bool:
    previous = pages._set_advice(True)
    pages._set_advice(previous)
    return bool(previous)


def test_advice_is_set_inside_nested_and_restored_after_errors() -> None:
    seen: list[tuple[str, bool]] = []

    def kept() -> None:
        seen.append(("huge", _advice()))

    def reset() -> None:
        seen.append(("small", _advice()))
        pages.huge_pages(kept)()
        seen.append(("small again", _advice()))
        raise RuntimeError("a failed reset")

    before = _advice()
    with pytest.raises(RuntimeError, match="a failed reset"):
        pages.small_pages(reset)()
    assert seen == [("small", False), ("huge", True), ("small again", False)]
    assert _advice() == before
