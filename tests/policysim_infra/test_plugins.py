"""Plugins are code named by the environment: one that fails to import is an error naming it
(issue 21; it used to be a warning and the run went on without its names)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from policysim_infra import plugins


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setattr(plugins, "_loaded", set(plugins._loaded))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.entry_point_plugins.cache_clear()
    yield tmp_path
    plugins.entry_point_plugins.cache_clear()


def _install_distribution(site: Path, module: str, code: str) -> None:
    """A distribution as pip leaves it in site-packages: ``<name>.dist-info`` with METADATA
    and an ``entry_points.txt`` declaring ``module`` in the plugins' group, and the module."""
    info = site / "policysim_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: policysim-test-plugin\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\ntest = {module}\n")
    (site / f"{module}.py").write_text(code)


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


def test_an_installed_distribution_declares_a_plugin_by_entry_point(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from socialenv.envs import policy_registry

    monkeypatch.delenv(plugins.PLUGINS_ENV_VAR, raising=False)
    monkeypatch.setattr(policy_registry, "_REGISTRY", dict(policy_registry._REGISTRY))
    _install_distribution(
        fresh,
        "entry_point_policysim_plugin",
        "from socialenv.envs.policy_registry import register_policy\n"
        "register_policy('from_an_entry_point', lambda env, seed, **kw: None)\n",
    )
    assert plugins.entry_point_plugins() == (
        ("entry_point_policysim_plugin", "policysim-test-plugin"),
    )
    assert plugins.plugin_modules() == ("baselines", "entry_point_policysim_plugin")
    assert "from_an_entry_point" in policy_registry.policy_names()  # loads the plugins
    sys.modules.pop("entry_point_policysim_plugin", None)


def test_a_broken_entry_point_plugin_names_its_distribution(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(plugins.PLUGINS_ENV_VAR, raising=False)
    _install_distribution(fresh, "broken_entry_point_plugin", "raise ImportError('no numpy')\n")
    with pytest.raises(
        plugins.PluginError,
        match=r"plugin 'broken_entry_point_plugin' \(entry point of policysim-test-plugin in "
        r"group 'policysim.plugins'\) failed to import: ImportError: no numpy; fix it or "
        r"uninstall its distribution",
    ):
        plugins.load_plugins()
    sys.modules.pop("broken_entry_point_plugin", None)
