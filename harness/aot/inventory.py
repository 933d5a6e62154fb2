"""Which Triton kernels a source tree defines, read from the source (AST only).

A jit function is one decorated with `triton.jit` / `jit` (bare or called
with options, also under `triton.autotune` / `triton.heuristics`) or passed
to `triton.jit(fn)`. A kernel is a jit function that no other jit function
of the same file calls: the launch entry points, as opposed to device
helpers. `moe-harness targets` must compile every kernel found here (a test
compares this with its registry) and the pipeline lints require a `targets`
step covering every file listed.

Imports nothing of the project and not triton: the lints use it on any checkout.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "harness"


def _is_jit(node: ast.AST) -> bool:
    """`jit`, `triton.jit`, or either called with options."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id == "jit"
    return isinstance(node, ast.Attribute) and node.attr == "jit" and isinstance(node.value, ast.Name) \
        and node.value.id == "triton"


def _called_names(fn: ast.FunctionDef) -> set[str]:
    return {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def kernels_in_source(text: str, filename: str = "<source>") -> list[str]:
    """Kernel (entry point) names defined in one Python source, in file order."""
    tree = ast.parse(text, filename)
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    jitted = [name for name, fn in defs.items() if any(_is_jit(d) for d in fn.decorator_list)]
    for call in ast.walk(tree):  # triton.jit(fn) applied to a plain function
        if isinstance(call, ast.Call) and _is_jit(call.func) and call.args and isinstance(call.args[0], ast.Name):
            if call.args[0].id in defs and call.args[0].id not in jitted:
                jitted.append(call.args[0].id)
    called = set().union(*(_called_names(defs[n]) for n in jitted)) if jitted else set()
    order = {name: fn.lineno for name, fn in defs.items()}
    return sorted((n for n in jitted if n not in called), key=order.get)


def jit_function_sources(text: str, filename: str = "<source>") -> dict[str, str]:
    """{name: source} of every jit function (kernels and device helpers) in one source."""
    tree = ast.parse(text, filename)
    defs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    jitted = {name for name, fn in defs.items() if any(_is_jit(d) for d in fn.decorator_list)}
    jitted |= {c.args[0].id for c in ast.walk(tree) if isinstance(c, ast.Call) and _is_jit(c.func) and c.args
               and isinstance(c.args[0], ast.Name) and c.args[0].id in defs}
    return {n: ast.get_source_segment(text, defs[n]) or "" for n in sorted(jitted)}


def kernel_files(root) -> dict[str, list[str]]:
    """{path relative to root: kernel names} for every .py file under root/harness that defines kernels."""
    root = Path(root)
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "jit" not in text:
            continue
        names = kernels_in_source(text, str(path))
        if names:
            out[path.relative_to(root).as_posix()] = names
    return out
