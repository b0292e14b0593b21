"""Plugins: modules that register extra population (``users=``) and policy names.

The registries live where the arrows allow (population names in
:mod:`agent_models.factory`, policy names in :mod:`socialenv.runner`); the modules that
fill them are imported here on first use, by name, so no package imports a package above
it. :data:`SHIPPED_PLUGINS` come with PolicySim (``baselines``: the HiSim ABM populations
and the popularity / MMR / suppress-flagged policies); add your own with the environment
variable ``POLICYSIM_PLUGINS="my_pkg.plugin,other.module"``.
"""

from __future__ import annotations

import importlib
import os
import warnings

SHIPPED_PLUGINS: tuple[str, ...] = ("baselines",)
PLUGINS_ENV_VAR = "POLICYSIM_PLUGINS"
_loaded: set[str] = set()


def plugin_modules() -> tuple[str, ...]:
    """The shipped plugins, then those named in ``$POLICYSIM_PLUGINS``."""
    extra = [m.strip() for m in os.environ.get(PLUGINS_ENV_VAR, "").split(",") if m.strip()]
    return tuple(dict.fromkeys([*SHIPPED_PLUGINS, *extra]))


def load_plugins() -> None:
    """Import every plugin module once (each registers its names on import). A plugin that
    fails to import is skipped with a warning naming it and the error."""
    for module in plugin_modules():
        if module in _loaded:
            continue
        _loaded.add(module)
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - a broken plugin must not break the env
            warnings.warn(f"PolicySim plugin {module!r} failed to import: {type(err).__name__}: {err}",
                          RuntimeWarning, stacklevel=2)
