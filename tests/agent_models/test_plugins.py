"""Plugins are code named by the environment: one that fails to import is an error naming it
(issue 21; it used to be a warning and the run went on without its names)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from policysim_infra import plugins


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(plugins, "_loaded", set(plugins._loaded))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_plugin_that_fails_to_import_is_an_error(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fresh / "broken_policysim_plugin.py").write_text("raise RuntimeError('half-installed')\n")
    monkeypatch.setenv(plugins.PLUGINS_ENV_VAR, "broken_policysim_plugin")
    for _ in range(2):  # never skipped on a later call
        with pytest.raises(
            plugins.PluginError,
            match=r"plugin 'broken_policysim_plugin' \(named in "
            r"\$POLICYSIM_PLUGINS\) failed to import: RuntimeError",
        ):
            plugins.load_plugins()
    monkeypatch.setenv(plugins.PLUGINS_ENV_VAR, "no_such_policysim_plugin")
    with pytest.raises(plugins.PluginError, match="ModuleNotFoundError"):
        plugins.load_plugins()
    sys.modules.pop("broken_policysim_plugin", None)


def test_a_working_plugin_registers_its_names(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (fresh / "fine_policysim_plugin.py").write_text("LOADED = True\n")
    monkeypatch.setenv(plugins.PLUGINS_ENV_VAR, "fine_policysim_plugin")
    plugins.load_plugins()
    assert (
        "fine_policysim_plugin" in plugins._loaded and sys.modules["fine_policysim_plugin"].LOADED
    )
