"""The floors of docs/design.md hold: the import contract in pyproject.toml
([tool.importlinter], run by `lint-imports`) keeps lower floors from
importing higher ones, no two modules import each other (directly or in a
circle), and the public API packages type-check ([tool.mypy])."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter, a [test] extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def _run(args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_floors_contract():
    """`lint-imports`: no room imports a room on a higher floor (function-level imports included)."""
    r = _run([_tool("lint-imports"), "--no-logo", "--no-cache"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "1 kept, 0 broken" in r.stdout


def module_cycles(package: str = "harness") -> list[list[str]]:
    """Strongly connected groups of more than one module (packages' __init__
    left out: a package importing its own submodules is not a circle)."""
    graph = grimp.build_graph(package, include_external_packages=False, cache_dir=None)
    modules = sorted(graph.modules)
    packages = {m for m in modules if any(o.startswith(m + ".") for o in modules)}
    nodes = [m for m in modules if m not in packages]
    edges = {m: [t for t in graph.find_modules_directly_imported_by(m) if t in nodes and t != m] for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    assert module_cycles() == []


def test_the_cycle_finder_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "circle_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from circle_pkg import b  # deferred: still an edge\n")
    (pkg / "b.py").write_text("import circle_pkg.a\n")
    (pkg / "c.py").write_text("import circle_pkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("circle_pkg") == [["circle_pkg.a", "circle_pkg.b"]]


def test_public_api_type_checks():
    """mypy over harness.formats, the conformance protocol and harness.strategies ([tool.mypy] files)."""
    r = _run([sys.executable, "-m", "mypy", "--no-incremental"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
