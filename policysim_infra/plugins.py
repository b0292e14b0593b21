"""Plugins: modules that register extra population (``users=``) and policy names.

The registries live where the arrows allow (population names in
:mod:`agent_models.factory`, policy names in :mod:`policysim.runner`); the modules that
fill them are imported here on first use, by name, so no package imports a package above
it. :data:`SHIPPED_PLUGINS` come with PolicySim (``baselines``: the HiSim ABM populations
and the popularity / MMR / suppress-flagged policies); add your own with the environment
variable ``POLICYSIM_PLUGINS="my_pkg.plugin,other.module"``.

A plugin is code: importing it runs it, with the rights of the process. Name only modules
you trust; ``POLICYSIM_PLUGINS`` is read from the environment (never from a config, run or
checkpoint file). A plugin that fails to import is an error (:class:`PluginError`), not a
warning: a run would otherwise go on without the names it registers.
"""

from __future__ import annotations

import importlib
import os

SHIPPED_PLUGINS: tuple[str, ...] = ("baselines",)
PLUGINS_ENV_VAR = "POLICYSIM_PLUGINS"
_loaded: set[str] = set()


def plugin_modules() -> tuple[str, ...]:
    """The shipped plugins, then those named in ``$POLICYSIM_PLUGINS``."""
    extra = [m.strip() for m in os.environ.get(PLUGINS_ENV_VAR, "").split(",") if m.strip()]
    return tuple(dict.fromkeys([*SHIPPED_PLUGINS, *extra]))


class PluginError(ValueError):
    """A plugin module that failed to import (names the module and the error)."""


def load_plugins() -> None:
    """Import every plugin module once (each registers its names on import). A plugin that
    fails to import raises :class:`PluginError` naming it and the error (again on the next
    call: a broken plugin is never skipped)."""
    for module in plugin_modules():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - any failure of the plugin's code is reported
            source = (
                "shipped with PolicySim"
                if module in SHIPPED_PLUGINS
                else f"named in ${PLUGINS_ENV_VAR}"
            )
            raise PluginError(
                f"plugin {module!r} ({source}) failed to import: {type(err).__name__}: {err}; "
                f"fix it or remove it from {PLUGINS_ENV_VAR}"
            ) from err
        _loaded.add(module)
