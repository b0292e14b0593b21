"""Plugins: modules that register extra population (``users=``) and policy names.

The registries live where the arrows allow (population names in
:mod:`agent_models.factory`, policy names in :mod:`socialenv.envs.policy_registry`); the modules that
fill them are imported here on first use, by name, so no package imports a package above
it. :data:`SHIPPED_PLUGINS` come with PolicySim (``baselines``: the HiSim ABM populations
and the popularity / MMR / suppress-flagged policies); add your own with the environment
variable ``POLICYSIM_PLUGINS="my_pkg.plugin,other.module"``, or, for a distribution you ship,
declare them as entry points of the :data:`ENTRY_POINT_GROUP` group in its ``pyproject.toml``::

    [project.entry-points."policysim.plugins"]
    my_plugin = "my_pkg.plugin"

Installing the distribution is then all it takes (:func:`entry_point_plugins`).

A plugin is code: importing it runs it, with the rights of the process. Name only modules
you trust; ``POLICYSIM_PLUGINS`` is read from the environment (never from a config, run or
checkpoint file), and installing a distribution that declares an entry point trusts it. A plugin that fails to import is an error (:class:`PluginError`), not a
warning: a run would otherwise go on without the names it registers.
"""

from __future__ import annotations

import functools
import importlib
import os

SHIPPED_PLUGINS: tuple[str, ...] = ("baselines",)
PLUGINS_ENV_VAR = "POLICYSIM_PLUGINS"
#: entry-point group of installed distributions' plugins (each entry point names a module).
ENTRY_POINT_GROUP = "policysim.plugins"
_loaded: set[str] = set()


@functools.cache
def entry_point_plugins() -> tuple[tuple[str, str], ...]:
    """(plugin module, the distribution that declares it) for every entry point of the
    :data:`ENTRY_POINT_GROUP` group of the installed distributions, ordered by entry-point
    name (so the import order does not depend on ``sys.path``). Read once per process
    (scanning every distribution costs ~10 ms; ``entry_point_plugins.cache_clear()`` reads
    them again)."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name)
    return tuple(
        (point.module, point.dist.name if point.dist is not None else "an unnamed distribution")
        for point in found
    )


def _sources() -> dict[str, str]:
    """Plugin module -> where it was named: shipped, then entry points, then the variable."""
    sources = {module: "shipped with PolicySim" for module in SHIPPED_PLUGINS}
    for module, dist in entry_point_plugins():
        sources.setdefault(module, f"entry point of {dist} in group {ENTRY_POINT_GROUP!r}")
    for module in os.environ.get(PLUGINS_ENV_VAR, "").split(","):
        if module.strip():
            sources.setdefault(module.strip(), f"named in ${PLUGINS_ENV_VAR}")
    return sources


def plugin_modules() -> tuple[str, ...]:
    """The shipped plugins, then the installed distributions' entry points, then those
    named in ``$POLICYSIM_PLUGINS``."""
    return tuple(_sources())


class PluginError(ValueError):
    """A plugin module that failed to import (names the module and the error)."""


def load_plugins() -> None:
    """Import every plugin module once (each registers its names on import). A plugin that
    fails to import raises :class:`PluginError` naming it and the error (again on the next
    call: a broken plugin is never skipped)."""
    for module, source in _sources().items():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - any failure of the plugin's code is reported
            raise PluginError(
                f"plugin {module!r} ({source}) failed to import: {type(err).__name__}: {err}; "
                + (
                    "fix it or uninstall its distribution"
                    if source.startswith("entry point")
                    else f"fix it or remove it from {PLUGINS_ENV_VAR}"
                )
            ) from err
        _loaded.add(module)
