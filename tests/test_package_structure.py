"""Package arrows run one way, no modules import each other in a circle, and no two
modules of different concepts share a file name.

Every module of the packages is parsed with :mod:`ast`; every import counts, the lazy
ones inside functions included (and ``importlib.import_module("literal")``), because a lazy
import is still a dependency: it only moves the failure from import time to call time.

Layers, lowest first (:data:`LAYERS`): ``policysim_infra`` (validation, redaction, extras,
plugins, checked files); ``agent_models`` and ``bandits`` (the brains and the learners, which
do not import each other); ``socialenv`` (core, mechanisms, scenarios, envs, the PettingZoo
view, fitting); ``baselines`` (reference policies and populations); ``policysim`` (the tools:
CLI, runner, sweep, play, plots). A package imports only packages of lower layers.

Inside ``socialenv`` (:data:`SOCIALENV_LAYERS`): the platform's model (``socialenv.core``,
``socialenv.mechanisms``, ``socialenv.scenarios``) never imports what is built on it (the
envs, the PettingZoo view, fitting), nor the ``socialenv`` package itself, which registers
the envs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: package -> layer; a package imports only packages of a lower layer.
LAYERS: dict[str, int] = {
    "policysim_infra": 0,
    "agent_models": 1,
    "bandits": 1,
    "socialenv": 2,
    "baselines": 3,
    "policysim": 4,
}
PACKAGES = tuple(LAYERS)
#: script folders whose file names take part in the name-clash check (not import-checked).
SCRIPT_FOLDERS = ("benchmarks", "examples")
#: file names that mean the same role in every package, so they may repeat.
CONVENTIONAL_NAMES = frozenset({"__init__", "__main__", "base", "config", "types", "env", "lever"})
#: package -> the project packages it must never import (derived from :data:`LAYERS`).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    package: tuple(
        other for other, other_layer in LAYERS.items() if other != package and other_layer >= layer
    )
    for package, layer in LAYERS.items()
}

#: The two layers inside ``socialenv``: the model (lower) and what is built on it (upper).
SOCIALENV_LAYERS: dict[str, tuple[str, ...]] = {
    "model": ("socialenv.core", "socialenv.mechanisms", "socialenv.scenarios"),
    "built_on_it": ("socialenv.envs", "socialenv.pettingzoo_env", "socialenv.fitting"),
}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of :data:`PACKAGES`."""
    out = {}
    for package in PACKAGES:
        if not (root / package).is_dir():
            continue
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of every import in ``tree``: ``import a.b`` gives ``a.b``,
    ``from a import b`` gives ``a.b`` (resolved against the known modules by the caller)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
        ):
            yield node.args[0].value, node.lineno


def _resolve(name: str, modules: set[str]) -> str | None:
    """The project module ``name`` refers to: itself or its longest dotted prefix that is a
    module (``from a import B`` names the class ``a.B``, which resolves to ``a``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported project module: first line}, over every import in the module."""
    files = module_files(root)
    modules = set(files)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: dict[str, int] = {}
        for name, line in _imported_names(tree, module, path.name == "__init__.py"):
            target = _resolve(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def back_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    """Imports that run against :data:`FORBIDDEN`, as ``"a.b:line -> c.d"``."""
    out = []
    for module, edges in graph.items():
        banned = FORBIDDEN.get(module.split(".")[0], ())
        for target, line in edges.items():
            if target.split(".")[0] in banned:
                out.append(f"{module}:{line} -> {target}")
    return sorted(out)


def inner_back_arrows(graph: dict[str, dict[str, int]]) -> list[str]:
    """Imports from socialenv's model into what is built on it (or into the ``socialenv``
    package, whose ``__init__`` imports the envs), as ``"a.b:line -> c.d"``."""
    model, upper = SOCIALENV_LAYERS["model"], SOCIALENV_LAYERS["built_on_it"]
    return sorted(
        f"{module}:{line} -> {target}"
        for module, edges in graph.items()
        if _within(module, model)
        for target, line in edges.items()
        if target == "socialenv" or _within(target, upper)
    )


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [f"{m}:{graph[m][t]} -> {t}" for m in component for t in graph[m] if t in members]
    return "; ".join(sorted(edges))


def name_clashes(root: Path = ROOT) -> list[str]:
    """File names (not :data:`CONVENTIONAL_NAMES`) that several modules or scripts share,
    as ``"name: path, path"``."""
    by_name: dict[str, list[str]] = {}
    for folder in (*PACKAGES, *SCRIPT_FOLDERS):
        if not (root / folder).is_dir():
            continue
        for path in sorted((root / folder).rglob("*.py")):
            if path.stem not in CONVENTIONAL_NAMES:
                by_name.setdefault(path.stem, []).append(path.relative_to(root).as_posix())
    return [
        f"{name}: {', '.join(paths)}" for name, paths in sorted(by_name.items()) if len(paths) > 1
    ]


def test_every_package_is_parsed() -> None:
    graph = import_graph()
    for package in PACKAGES:
        assert package in graph
    assert len(graph) > 100
    # a lazy import inside a function is seen: slates are built by bandits.slate on demand
    assert "bandits.slate" in graph["socialenv.envs.policy_registry"]


def test_layers_are_what_the_docs_say() -> None:
    assert FORBIDDEN["policysim_infra"] == (
        "agent_models",
        "bandits",
        "socialenv",
        "baselines",
        "policysim",
    )
    assert set(FORBIDDEN["agent_models"]) == {"bandits", "socialenv", "baselines", "policysim"}
    assert set(FORBIDDEN["socialenv"]) == {"baselines", "policysim"}
    assert FORBIDDEN["baselines"] == ("policysim",)
    assert FORBIDDEN["policysim"] == ()


def test_no_import_runs_back_up() -> None:
    arrows = back_arrows(import_graph())
    assert not arrows, "imports against the package layering:\n" + "\n".join(arrows)


def test_socialenvs_model_never_imports_the_envs_built_on_it() -> None:
    graph = import_graph()
    for layer in SOCIALENV_LAYERS.values():
        for package in layer:
            assert package in graph, package  # every named sub-package exists
    arrows = inner_back_arrows(graph)
    assert not arrows, "socialenv's model imports what is built on it:\n" + "\n".join(arrows)


def test_no_module_import_cycle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "modules importing each other:\n" + "\n".join(
        _describe(c, graph) for c in found
    )


def test_the_tools_build_policies_through_baselines_directly() -> None:
    """The tools sit above ``baselines`` and import it: the names they list and the policies
    they build come from :mod:`baselines.policies`, not only from the string plugins."""
    graph = import_graph()
    for tool in (
        "policysim.runner",
        "policysim.cli",
        "policysim.sweep.config",
        "policysim.sweep.trial",
    ):
        assert "baselines.policies" in graph[tool], tool


def test_no_two_modules_share_a_name() -> None:
    clashes = name_clashes()
    assert not clashes, "file names shared by modules of different concepts:\n" + "\n".join(clashes)


# ----------------------------------------------------------------------------- the checker
def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("files", "arrow"),
    [
        (
            {"bandits/x.py": "def f():\n    from socialenv.envs import rec\n"},
            "bandits.x:2 -> socialenv.envs.rec",
        ),
        ({"agent_models/x.py": "import baselines\n"}, "agent_models.x:1 -> baselines"),
        (
            {
                "socialenv/x.py": "def f():\n    import importlib\n    importlib.import_module('baselines.y')\n"
            },
            "socialenv.x:3 -> baselines.y",
        ),
        (
            {"policysim_infra/x.py": "from agent_models import y\n"},
            "policysim_infra.x:1 -> agent_models",
        ),
        ({"bandits/x.py": "import agent_models\n"}, "bandits.x:1 -> agent_models"),
        (
            {"baselines/x.py": "def f():\n    from policysim import z\n"},
            "baselines.x:2 -> policysim",
        ),
    ],
)
def test_checker_sees_a_back_arrow(tmp_path: Path, files: dict[str, str], arrow: str) -> None:
    base = {f"{p}/__init__.py": "" for p in PACKAGES} | {
        "socialenv/envs/__init__.py": "",
        "socialenv/envs/rec.py": "",
        "baselines/y.py": "",
    }
    _write(tmp_path, base | files)
    assert back_arrows(import_graph(tmp_path)) == [arrow]


def test_checker_sees_the_model_import_an_env(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {f"{p}/__init__.py": "" for p in PACKAGES}
        | {f"{p.replace('.', '/')}/__init__.py": "" for p in SOCIALENV_LAYERS["model"]}
        | {f"{p.replace('.', '/')}/__init__.py": "" for p in SOCIALENV_LAYERS["built_on_it"]}
        | {
            "socialenv/envs/rec.py": "from socialenv.core import world\n",  # allowed
            "socialenv/core/world.py": "def f():\n    from socialenv.envs import rec\n",
            "socialenv/mechanisms/news.py": "from .. import fitting\n",
            "socialenv/scenarios/load.py": "import socialenv\n",
            "socialenv/fitting/fit.py": "import socialenv.scenarios.load\n",  # allowed
        },
    )
    assert inner_back_arrows(import_graph(tmp_path)) == [
        "socialenv.core.world:2 -> socialenv.envs.rec",
        "socialenv.mechanisms.news:1 -> socialenv.fitting",
        "socialenv.scenarios.load:1 -> socialenv",
    ]


def test_checker_sees_a_lazy_relative_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {f"{p}/__init__.py": "" for p in PACKAGES}
        | {
            "socialenv/a.py": "from socialenv.b import thing\n",
            "socialenv/b.py": "def thing():\n    from .c import other\n",
            "socialenv/c.py": "def other():\n    from . import a\n",
            "socialenv/d.py": "from socialenv import a\n",
        },
    )
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["socialenv.a", "socialenv.b", "socialenv.c"]]


def test_checker_sees_a_name_clash(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {f"{p}/__init__.py": "" for p in PACKAGES}
        | {
            "socialenv/moderation.py": "",
            "baselines/moderation.py": "",
            "socialenv/envs/config.py": "",
            "policysim/config.py": "",
            "benchmarks/moderation.py": "",
        },
    )
    assert name_clashes(tmp_path) == [
        "moderation: socialenv/moderation.py, baselines/moderation.py, benchmarks/moderation.py"
    ]
