"""The tree's layout rules, read from the source with ``ast`` (nothing is imported).

* Imports between the project's own modules flow one way: no cycle, counting
  package ``__init__`` files and imports inside functions, with relative
  imports resolved; and each stage folder imports only the stages before it
  (:data:`LAYERS`, the order of ARCHITECTURE.md). Nothing imports the package root.
* ``passes/`` (installed, and linked in the checkout, as ``mx_trt.passes``) is
  pure: it imports neither the rest of the plugin nor MXNet, ONNX, ONNX Runtime
  or TensorRT.
* No module over :data:`MAX_MODULE_LINES` lines, no class over
  :data:`MAX_CLASS_LINES` lines.
* The converter registry imports no converter module (the package
  ``mx_trt.export.converters`` imports them; the registry stays a leaf).
* The top-level modules (:data:`TOP_LEVEL`: the start-up hook
  ``mx_trt_autoload.py`` and ``setup.py``) count in the cycle and size checks.
  ``setup.py`` imports nothing of the project; the start-up hook is the only
  one that imports ``mx_trt``, only inside functions, and nothing in the package
  imports either of them.
* No file of ``tests/`` is over :data:`MAX_MODULE_LINES` lines either.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("mx_trt",)
#: The modules at the top of the repository (installed at the root of site-packages, or run by pip).
TOP_LEVEL = ("mx_trt_autoload", "setup")
#: The one top-level module that may import the package (after mxnet has loaded, inside functions).
STARTUP_HOOK = "mx_trt_autoload"
#: What the start-up hook may import when it is loaded, at every interpreter start.
STARTUP_IMPORTS = ("os", "sys")
#: The stages, first to last: a module imports only modules of its own stage or earlier ones.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("mx_trt._version", "mx_trt.errors", "mx_trt.fsutil"),
    ("mx_trt.options", "mx_trt.settings", "mx_trt.patches"),
    ("mx_trt.passes",),
    ("mx_trt.graph",),
    ("mx_trt.export",),
    ("mx_trt.cache",),
    ("mx_trt.builder",),
    ("mx_trt.runtime",),
    ("mx_trt.pipeline",),
    ("mx_trt.frontends",),
    ("mx_trt.quantize",),
    ("mx_trt.artifacts", "mx_trt.artifacts_onnx"),
    ("mx_trt.serving",),
    ("mx_trt.tools",),
)
PASSES = "mx_trt.passes"
MAX_MODULE_LINES = 800
MAX_CLASS_LINES = 300
#: Top-level packages that ``passes/`` must not import.
PASSES_FORBIDDEN = ("mx_trt", "mxnet", "onnx", "onnxruntime", "openvino", "tensorrt", "tensorrt_rtx")
REGISTRY = "mx_trt.export.converters.registry"
#: What the registry may import from its own package: the leaf type module.
REGISTRY_ALLOWED = ("mx_trt.export.spec",)


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module name.

    Attributes:
        target: The imported module (for ``from m import n``: ``m.n`` if that is a
            module of the project, else ``m``).
        line: Line of the statement in the importing file.
    """

    target: str
    line: int


def _modules() -> Dict[str, str]:
    """Module name -> path, for every ``.py`` file under the project's packages."""
    mods: Dict[str, str] = {}
    for pkg in PACKAGES:
        for root, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return mods


MODULES = _modules()
#: The top-level modules, name -> path.
TOP_MODULES = {m: os.path.join(ROOT, m + ".py") for m in TOP_LEVEL}
#: Every module the checks read: the package's and the top-level ones.
ALL_MODULES = {**MODULES, **TOP_MODULES}
_TREES: Dict[str, ast.Module] = {}


def _tree(mod: str) -> ast.Module:
    if mod not in _TREES:
        with open(ALL_MODULES[mod], encoding="utf-8") as f:
            _TREES[mod] = ast.parse(f.read(), filename=ALL_MODULES[mod])
    return _TREES[mod]


def _rel(mod: str) -> str:
    return os.path.relpath(ALL_MODULES[mod], ROOT)


def _imports(mod: str) -> Iterator[Import]:
    """Every import in ``mod`` (also inside functions and ``if`` blocks), absolute names."""
    is_package = ALL_MODULES[mod].endswith("__init__.py")
    package = mod if is_package else mod.rpartition(".")[0]
    for node in ast.walk(_tree(mod)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield Import(sub if sub in ALL_MODULES else source, node.lineno)


def _own(target: str) -> Optional[str]:
    """The project module an import lands in (the longest known prefix), or ``None``."""
    t = target
    while t:
        if t in ALL_MODULES:
            return t
        t = t.rpartition(".")[0]
    return None


def _edges() -> Dict[str, Dict[str, int]]:
    """module -> {imported project module: first line importing it}."""
    edges: Dict[str, Dict[str, int]] = {m: {} for m in ALL_MODULES}
    for m in ALL_MODULES:
        for imp in _imports(m):
            t = _own(imp.target)
            if t is not None and t != m:
                edges[m].setdefault(t, imp.line)
    return edges


def _strongly_connected(edges: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """Tarjan's components with more than one module, iteratively. O(V + E)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    out: List[List[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work: List[Tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def _a_cycle(comp: List[str], edges: Dict[str, Dict[str, int]]) -> List[str]:
    """One shortest cycle through the component's first module (BFS inside the component)."""
    members = set(comp)
    start = comp[0]
    parent: Dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: List[str] = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start] + path[::-1][1:] + [start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [comp[0]]  # unreachable for a strongly connected component


def test_no_import_cycle_between_the_projects_modules() -> None:
    edges = _edges()
    problems = []
    for comp in _strongly_connected(edges):
        cycle = _a_cycle(comp, edges)
        steps = " -> ".join(
            f"{b} ({_rel(a)}:{edges[a][b]})" for a, b in zip(cycle, cycle[1:]))
        problems.append(f"import cycle among {', '.join(comp)}:\n    {cycle[0]} -> {steps}")
    assert not problems, (
        "imports must flow one way (imports inside functions count; break the cycle by moving "
        "the shared part to a lower module or by passing a callable in):\n" + "\n".join(problems))


def test_passes_import_neither_the_plugin_nor_mxnet_onnx_or_tensorrt() -> None:
    problems = []
    for m in sorted(MODULES):
        if not (m == PASSES or m.startswith(PASSES + ".")):
            continue
        for imp in _imports(m):
            top = imp.target.split(".")[0]
            own = imp.target == PASSES or imp.target.startswith(PASSES + ".")
            if top in PASSES_FORBIDDEN and not own:
                problems.append(f"{_rel(m)}:{imp.line} imports {imp.target}")
    assert not problems, (
        f"passes/ is pure Python on the IR and must not import {', '.join(PASSES_FORBIDDEN)}:\n"
        + "\n".join(problems))


def test_the_projects_own_modules_are_imported_at_the_top() -> None:
    """Imports inside functions are for third-party packages loaded lazily, never a way around a cycle."""
    bad = []
    for mod in sorted(MODULES):
        for fn in ast.walk(_tree(mod)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                    bad.append(f"{_rel(mod)}:{node.lineno} imports {'.' * node.level}{node.module or ''} "
                               f"inside {fn.name}()")
                elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in PACKAGES for a in node.names):
                    bad.append(f"{_rel(mod)}:{node.lineno} imports {node.names[0].name} inside {fn.name}()")
    assert not bad, "the project's own modules imported inside functions:\n" + "\n".join(bad)


def _line_count(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_no_module_over_the_line_limit() -> None:
    big = sorted(((_line_count(p), m) for m, p in ALL_MODULES.items()), reverse=True)
    problems = [f"{_rel(m)}: {n} lines" for n, m in big if n > MAX_MODULE_LINES]
    assert not problems, (
        f"modules over {MAX_MODULE_LINES} lines (split them by responsibility):\n" + "\n".join(problems))


def test_no_class_over_the_line_limit() -> None:
    problems = []
    for m in sorted(ALL_MODULES):
        for node in ast.walk(_tree(m)):
            if isinstance(node, ast.ClassDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_CLASS_LINES:
                    problems.append(f"{_rel(m)}:{node.lineno} class {node.name}: {n} lines")
    assert not problems, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(problems)


def test_the_converter_registry_imports_no_converter() -> None:
    assert REGISTRY in MODULES, f"{REGISTRY} is missing: update tests/test_layout.py if it moved"
    problems = []
    for imp in _imports(REGISTRY):
        t = _own(imp.target)
        if t is not None and (t == "mx_trt.export.converters" or t.startswith("mx_trt.export.converters.")) \
                and t not in REGISTRY_ALLOWED:
            problems.append(f"{_rel(REGISTRY)}:{imp.line} imports {t}")
    assert not problems, (
        "the registry must stay a leaf of mx_trt.export.converters (the package imports the converter "
        f"modules; the registry may import only {', '.join(REGISTRY_ALLOWED)}):\n" + "\n".join(problems))


def _layer(mod: str) -> int:
    for k, prefixes in enumerate(LAYERS):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return k
    raise AssertionError(f"{mod} is in no stage of LAYERS: add its folder to tests/test_layout.py and ARCHITECTURE.md")


def test_every_module_belongs_to_a_stage() -> None:
    for m in MODULES:
        if m != "mx_trt":
            _layer(m)


def test_stages_import_only_earlier_stages() -> None:
    edges = _edges()
    problems = []
    for m in sorted(MODULES):
        if m == "mx_trt":
            continue
        for t, line in sorted(edges[m].items()):
            if t in TOP_MODULES:
                continue  # test_the_package_imports_no_top_level_module says it
            if t == "mx_trt":
                problems.append(f"{_rel(m)}:{line} imports the package root (import the module that defines the name)")
            elif _layer(t) > _layer(m):
                problems.append(f"{_rel(m)}:{line} ({LAYERS[_layer(m)][0]}) imports {t}, a later stage "
                                f"({LAYERS[_layer(t)][0]})")
    assert not problems, "imports must point to earlier stages only:\n" + "\n".join(problems)


def test_the_tests_mirror_the_packages_folders() -> None:
    """Every folder of the package has a folder of tests with the same name."""
    package = os.path.join(ROOT, "mx_trt")
    folders = sorted(d for d in os.listdir(package)
                     if os.path.isfile(os.path.join(package, d, "__init__.py")))
    missing = [d for d in folders
               if not any(f.startswith("test_") and f.endswith(".py")
                          for f in (os.listdir(os.path.join(ROOT, "tests", d))
                                    if os.path.isdir(os.path.join(ROOT, "tests", d)) else []))]
    assert not missing, f"mx_trt/{{{','.join(missing)}}} have no tests/<folder>/test_*.py"


def test_the_checkouts_mx_trt_passes_links_every_module_of_passes() -> None:
    """In a checkout ``mx_trt/passes/`` holds one link per module of ``passes/``; the wheel holds the files."""
    src = sorted(f for f in os.listdir(os.path.join(ROOT, "passes")) if f.endswith(".py"))
    linked = os.path.join(ROOT, "mx_trt", "passes")
    if not os.path.islink(os.path.join(linked, "__init__.py")):
        pytest.skip("installed tree: mx_trt/passes holds the files themselves")
    links = sorted(f for f in os.listdir(linked) if f.endswith(".py"))
    assert links == src, f"mx_trt/passes/ links {links}, passes/ holds {src}: add or remove the links"
    for f in links:
        target = os.path.realpath(os.path.join(linked, f))
        assert target == os.path.realpath(os.path.join(ROOT, "passes", f)), f"mx_trt/passes/{f} points to {target}"


def test_no_test_file_over_the_line_limit() -> None:
    """The tests follow the modules' limit: a file over it is split by topic."""
    problems = []
    for root, dirs, files in os.walk(os.path.join(ROOT, "tests")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                n = _line_count(path)
                if n > MAX_MODULE_LINES:
                    problems.append(f"{os.path.relpath(path, ROOT)}: {n} lines")
    assert not problems, f"test files over {MAX_MODULE_LINES} lines (split them by topic):\n" + "\n".join(problems)


def test_the_package_imports_no_top_level_module() -> None:
    """Imports flow from the start-up hook into the package, never back (also lazily, inside functions)."""
    edges = _edges()
    problems = [f"{_rel(m)}:{line} imports {t}" for m in sorted(MODULES) for t, line in sorted(edges[m].items())
                if t in TOP_MODULES]
    assert not problems, (
        f"nothing in {', '.join(PACKAGES)} may import the top-level modules ({', '.join(TOP_LEVEL)}); "
        "move what it needs into the package:\n" + "\n".join(problems))


def test_setup_imports_nothing_of_the_project() -> None:
    """``setup.py`` runs before anything is installed: it reads the version, it does not import it."""
    problems = [f"{_rel('setup')}:{imp.line} imports {imp.target}" for imp in _imports("setup")
                if imp.target.split(".")[0] in PACKAGES + TOP_LEVEL + ("passes",)]
    assert not problems, "setup.py must not import the project:\n" + "\n".join(problems)


def test_only_the_startup_hook_imports_the_package_and_only_lazily() -> None:
    """Of the top-level modules only the start-up hook imports ``mx_trt``, and only inside functions.

    At module level it imports no more than :data:`STARTUP_IMPORTS` (it runs at
    every interpreter start; imports under ``if TYPE_CHECKING:`` are the type
    checker's only).
    """
    problems = []
    for m in TOP_LEVEL:
        for imp in _imports(m):
            if imp.target.split(".")[0] in PACKAGES and m != STARTUP_HOOK:
                problems.append(f"{_rel(m)}:{imp.line} imports {imp.target}")
    for node in _tree(STARTUP_HOOK).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break  # what runs later is not the start-up's cost
            names = ([a.name for a in sub.names] if isinstance(sub, ast.Import)
                     else [sub.module or ""] if isinstance(sub, ast.ImportFrom) else [])
            problems += [f"{_rel(STARTUP_HOOK)}:{sub.lineno} imports {n} at start-up"
                         for n in names if n.split(".")[0] not in STARTUP_IMPORTS]
    hook_imports = {imp.target.split(".")[0] for imp in _imports(STARTUP_HOOK)}
    assert "mx_trt" in hook_imports, f"{STARTUP_HOOK} no longer imports mx_trt: update TOP_LEVEL's rules"
    assert not problems, "top-level modules import the package only from the start-up hook:\n" + "\n".join(problems)


# -- the checker itself, on small trees -------------------------------------------------------------


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b": 1}, "b": {}}, []),
    ({"a": {"b": 1}, "b": {"a": 2}}, [["a", "b"]]),
    ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c"]]),
])
def test_cycle_finder(edges: Dict[str, Dict[str, int]], expected: List[List[str]]) -> None:
    assert sorted(_strongly_connected(edges)) == expected
    for comp in expected:
        cycle = _a_cycle(comp, edges)
        assert cycle[0] == cycle[-1] and set(cycle) == set(comp)
