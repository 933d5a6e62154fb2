"""The layout of suites/: no module imports a test module (test_*.py) or a
conftest. What tests share lives in plain helper modules named for what they
hold; fixtures are used by name, never imported (suites/README.md)."""
from __future__ import annotations

import ast
from pathlib import Path

SUITES = Path(__file__).resolve().parent
ROOT = SUITES.parent


def _is_test_or_conftest(name: str) -> bool:
    return name == "conftest" or name.startswith("test_")


def _package(path: Path) -> str:
    """The dotted package a module under ROOT belongs to ("" at the root)."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def forbidden_imports(path: Path, source: str | None = None) -> list[str]:
    """`file:line: module` for each import in `path` of a test module or a
    conftest: `import a.test_x`, `from a import test_x`, `from a.conftest
    import f`, relative forms (`from . import conftest`, `from .test_x import
    f`) and importlib.import_module / __import__ of a literal name."""
    tree = ast.parse(source if source is not None else path.read_text(), str(path))
    pkg = _package(path).split(".") if _package(path) else []
    where = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] if node.level - 1 <= len(pkg) else []
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module] + [f"{module}.{a.name}" if module else a.name for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        for name in names:
            # any test_* or conftest component: `from a.test_x.sub import f` counts too
            parts = name.split(".")
            hit = next((i for i in range(len(parts)) if _is_test_or_conftest(parts[i])), None)
            if hit is not None:
                found.append((node.lineno, ".".join(parts[: hit + 1])))
                break
    return [f"{where}:{line}: imports {module}" for line, module in sorted(found)]


def _modules():
    """Every module under suites/ but the data files of fixtures/ folders."""
    return sorted(p for p in SUITES.rglob("*.py") if "fixtures" not in p.relative_to(SUITES).parts)


def test_no_module_imports_a_test_module_or_a_conftest():
    bad = [line for p in _modules() for line in forbidden_imports(p)]
    assert not bad, ("these import a test module or a conftest; move what they share into a helper module "
                     "(fixtures: use them by name):\n" + "\n".join(bad))


def test_the_check_sees_every_form():
    """Each form is caught (the check would otherwise pass vacuously)."""
    here = SUITES / "properties" / "test_x.py"
    bad = {
        "import conftest": "conftest",
        "import suites.properties.test_kernels as k": "suites.properties.test_kernels",
        "from suites.properties import test_kernels": "suites.properties.test_kernels",
        "from suites.checkpoints.conftest import made": "suites.checkpoints.conftest",
        "from . import conftest": "suites.properties.conftest",
        "from .test_kernels import FMTS": "suites.properties.test_kernels",
        "from .. import conftest": "suites.conftest",
        "from ..lm_eval.conftest import tiny_lm": "suites.lm_eval.conftest",
        "def f():\n    from suites.properties.test_kernels import FMTS": "suites.properties.test_kernels",
        "import importlib\nimportlib.import_module('suites.properties.test_kernels')": "suites.properties.test_kernels",
    }
    for src, module in bad.items():
        found = forbidden_imports(here, src)
        assert found == [f"suites/properties/test_x.py:{src.count(chr(10)) + 1}: imports {module}"], (src, found)
    ok = ("from suites.properties import kernel_properties\nfrom suites.regressions.inject import detects\n"
          "from . import oracles\nimport pytest\nfrom harness.testing.checks import oracle\n")
    assert forbidden_imports(here, ok) == []
