"""The import graph of ``gpdlm_cli`` has no cycle, and no module imports from a layer above it.

The graph is read from the source with ``ast`` (nothing is imported): one node per module (a
package is its ``__init__``), one edge per import of another ``gpdlm_cli`` module -- at module level
or inside a function, absolute or relative (resolved against the importing module's package), and
``from package import name`` counts as an import of ``package.name`` when that is a module.
Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit edges are left out
on purpose, or every package's ``__init__`` that re-exports its modules would close a cycle.

**Layers**, bottom to top (CONTRIBUTING.md, "Layout"): a module may import its own layer and the layers
below, never one above; modules of one layer may import each other (the cycle check covers them).
A layer is a set of whole top-level modules and packages of ``gpdlm_cli`` (no sub-package sits on a
layer of its own): a module's layer is that of its first dotted part below ``gpdlm_cli``. The graph
of packages (every module folded into its top-level package) has no cycle either.

0. ``exceptions``, ``validation``, ``files``, ``runtime``, ``signals`` (process signals: the trainer
   defers them, the CLI and the run lifecycle install them) and the package's ``__init__``: the
   standard library only
1. ``data``, ``likelihoods``, ``features``, ``estimators``, ``metrics``, ``tracking`` (the MLflow
   store client, run identity and liveness): the building blocks
2. ``models``
3. ``objectives``
4. ``training``
5. ``schema``: the config schema (types, ranges, choices of every key) and the typed specs families receive
6. ``methods``: the model families (``methods.components`` builds the shared parts from the specs)
7. ``build`` and ``prepare``: the composition root (``prepare``: every check, the data, the method)
8. ``sweep``: planning, composing, beta-free collapsing and batching a multirun's jobs, and the Hydra
   callback of a multirun (it prepares jobs as their runs would)
9. ``run``: what one run is (saved models, the tracked run; asks ``sweep`` for a batched member)
10. ``analysis``: reports from stored results (no torch)
11. ``hydra_apps``: the Hydra entry points
12. ``commands``: what the subcommands run
13. ``cli`` and ``config_check``: the ``gpdlm`` dispatcher and its check of the overrides (which knows
    the commands' own validators)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import gpdlm_cli

PACKAGE = Path(gpdlm_cli.__file__).resolve().parent
ROOT = "gpdlm_cli"

#: bottom to top; a module's layer is that of its first dotted part below gpdlm_cli (whole packages only)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "exceptions", "validation", "files", "runtime", "signals"),  # "": gpdlm_cli/__init__
    ("data", "likelihoods", "features", "estimators", "metrics", "tracking"),
    ("models",),
    ("objectives",),
    ("training",),
    ("schema",),
    ("methods",),
    ("build", "prepare"),
    ("sweep",),
    ("run",),
    ("analysis",),
    ("hydra_apps",),
    ("commands",),
    ("cli", "config_check"),
)

#: import cycles and upward imports still allowed: none (issue 20 removed the last ones; keep these
#: empty -- an entry here is a known defect, named so that it cannot grow silently)
PENDING_COMMANDS_CYCLES: set[tuple[str, ...]] = set()
PENDING_COMMANDS_UPWARD: set[tuple[str, str]] = set()


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the gpdlm_cli modules it imports (module level and inside functions); a fresh copy of the
    graph parsed once per session (the four tests that read it parsed the package four times)."""
    return {m: set(targets) for m, targets in _parsed_graph().items()}


@functools.cache
def _parsed_graph() -> dict[str, set[str]]:
    mods = module_files()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                # the longest module prefix of the imported name (``import a.b.c`` imports a.b.c)
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t.startswith(ROOT + ".") and t != mod:
                    graph[mod].add(t)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (the cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def a_cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One concrete cycle through the component (for the failure message)."""
    inside = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in inside)
        back = [w for w in nxt if w in seen]
        if back:
            return path[path.index(back[0]) :] + [back[0]]
        fresh = [w for w in nxt if w not in seen]
        path.append(fresh[0])
        seen.add(fresh[0])


def package_of(module: str) -> str:
    """The top-level module or package of ``gpdlm_cli`` that ``module`` belongs to (``""``: the package's ``__init__``)."""
    return module[len(ROOT) + 1 :].split(".")[0] if module != ROOT else ""


def layer_of(module: str) -> int:
    """The layer of ``module``'s top-level package (``package_of``)."""
    top = package_of(module)
    found = [i for i, names in enumerate(LAYERS) if top in names]
    assert found, f"module {module} is in no layer of LAYERS: add its package {top!r} to the list"
    return found[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """top-level package -> the other top-level packages its modules import."""
    out: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for m, ts in graph.items():
        out[package_of(m)] |= {package_of(t) for t in ts} - {package_of(m)}
    return out


def test_the_ast_walk_sees_relative_absolute_and_function_local_imports():
    graph = import_graph()
    assert "gpdlm_cli.exceptions" in graph["gpdlm_cli.validation"]  # from .exceptions import ...
    assert "gpdlm_cli.data.catalog" in graph["gpdlm_cli.data.registry"]  # from .catalog import (...)
    assert "gpdlm_cli.data.registry" in graph["gpdlm_cli.data.splits"]  # inside a function
    assert "gpdlm_cli.data.sources" in graph["gpdlm_cli.data.registry"]  # from . import sources
    assert "gpdlm_cli.validation" in graph["gpdlm_cli.methods.components"]  # from ..validation import
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _resolve("gpdlm_cli.data.splits", False, 2, "exceptions") == "gpdlm_cli.exceptions"
    assert _resolve("gpdlm_cli.data", True, 1, "table") == "gpdlm_cli.data.table"
    assert layer_of("gpdlm_cli.run.train") > layer_of("gpdlm_cli.sweep.plan") > layer_of("gpdlm_cli.tracking")
    assert layer_of("gpdlm_cli.tracking.tracker") > layer_of("gpdlm_cli.signals") == 0
    assert package_graph({"gpdlm_cli.a.x": {"gpdlm_cli.b.y", "gpdlm_cli.a.z"}, "gpdlm_cli.b.y": set()}) == {
        "a": {"b"},
        "b": set(),
    }
    assert layer_of("gpdlm_cli") == 0 and layer_of("gpdlm_cli.commands") == layer_of("gpdlm_cli.commands.train")


def test_import_graph_has_no_cycle():
    graph = import_graph()
    comps = strongly_connected(graph)
    new = [c for c in comps if tuple(c) not in PENDING_COMMANDS_CYCLES]
    report = "\n".join(f"  {' -> '.join(a_cycle(graph, c))}   (component: {', '.join(c)})" for c in new)
    assert not new, f"import cycles in gpdlm_cli:\n{report}"


def test_layers_are_whole_packages_each_on_one_layer():
    names = [n for layer in LAYERS for n in layer]
    assert all("." not in n for n in names), "a layer names whole top-level packages only"
    assert len(names) == len(set(names)), "a package sits on one layer"
    assert set(package_graph(import_graph())) <= set(names)


def test_the_package_graph_has_no_cycle():
    """Folding every module into its top-level package leaves no cycle (e.g. tracking -> sweep ->
    run -> tracking would be one even if each module edge went down a finer layer)."""
    packages = package_graph(import_graph())
    comps = strongly_connected(packages)
    report = "\n".join(f"  {' -> '.join(a_cycle(packages, c))}" for c in comps)
    assert not comps, f"import cycles between the packages of gpdlm_cli:\n{report}"


def test_no_module_imports_from_a_layer_above_it():
    graph = import_graph()
    for mod in graph:
        layer_of(mod)  # every module has a layer
    upward = sorted(
        (m, t)
        for m, ts in graph.items()
        for t in ts
        if layer_of(t) > layer_of(m) and (m, t) not in PENDING_COMMANDS_UPWARD
    )
    report = "\n".join(f"  {m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})" for m, t in upward)
    assert not upward, f"imports from a layer above:\n{report}"


def test_the_pending_allow_lists_name_only_commands_and_only_what_still_exists():
    graph = import_graph()
    comps = {tuple(c) for c in strongly_connected(graph)}
    for comp in PENDING_COMMANDS_CYCLES:
        assert comp in comps, f"{comp} is no longer a cycle: remove it from PENDING_COMMANDS_CYCLES"
        assert all(m.startswith(ROOT + ".commands.") or m == ROOT + ".hydra_apps" for m in comp), comp
    for m, t in PENDING_COMMANDS_UPWARD:
        assert t in graph[m], f"{m} no longer imports {t}: remove it from PENDING_COMMANDS_UPWARD"
        assert t.startswith(ROOT + ".commands."), (m, t)
