"""The one YAML loader for input files (eval configs, pipelines), with limits.

A config or pipeline file is read by code that trusts its shape; a hostile or
broken one must be refused before it costs time or memory, with one line that
names the file and the place. Limits, checked in this order:

  MAX_BYTES    file size (read stops one byte past it)
  encoding     UTF-8 text only (NUL bytes, UTF-16/32 byte-order marks refused)
  MAX_DEPTH    nesting depth, counted on the event stream before any tree is
               built (PyYAML builds trees recursively)
  MAX_NODES    nodes written in the file, and nodes after alias expansion
               (an alias costs what it stands for: `a: &x [..]`, `b: [*x, *x]`)
  recursion    an anchor used inside itself

Duplicate mapping keys are reported with both line numbers: as warnings
(`duplicates="warn"`) or as an error (`duplicates="error"`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MAX_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 100_000

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


class YAMLInputError(ValueError):
    """Refused input; str() is one line, 'FILE: PROBLEM (line N)'. `part` is "<file>"
    (size, encoding, unreadable) or "<yaml>" (syntax, limits, duplicate keys)."""

    def __init__(self, path, part: str, problem: str, line: int | None = None):
        if line is not None:
            problem = f"{problem} (line {line})"
        super().__init__(f"{path}: {problem}")
        self.path, self.part, self.problem, self.line = str(path), part, problem, line


@dataclass
class Loaded:
    data: object
    text: str
    warnings: list[str] = field(default_factory=list)
    nodes: int = 0           # nodes after alias expansion
    depth: int = 0           # deepest collection nesting after alias expansion (a scalar: 0)


def read_text(path) -> str:
    """The file as UTF-8 text, or YAMLInputError (size, encoding, unreadable)."""
    path = Path(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or /dev/zero would block or never end
            raise YAMLInputError(path, "<file>", "not a regular file")
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise YAMLInputError(path, "<file>", f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:
        raise YAMLInputError(path, "<file>", f"larger than the {MAX_BYTES} byte limit for a YAML input file")
    for bom, name in _BOMS.items():
        if raw.startswith(bom):
            raise YAMLInputError(path, "<file>", f"{name} text; save it as UTF-8")
    if b"\x00" in raw:
        what = "UTF-16/UTF-32 text without a byte-order mark" if raw[1:2] == b"\x00" or raw[:1] == b"\x00" \
            else "binary data (NUL bytes)"
        raise YAMLInputError(path, "<file>", f"{what}; expected UTF-8 YAML text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise YAMLInputError(path, "<file>", f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})",
                             line) from None


def _line(mark) -> int | None:
    return mark.line + 1 if mark is not None else None


def _yaml_error(path, e: yaml.YAMLError) -> YAMLInputError:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None)
    msg = f"{context}: {problem}" if context else problem
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return YAMLInputError(path, "<yaml>", "not valid YAML: " + " ".join(str(msg).split()) + where)


def _scan(path, text: str) -> None:
    """Depth and written-node limits on the event stream (no tree is built)."""
    depth = nodes = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            nodes += 1
            if nodes > MAX_NODES:
                raise YAMLInputError(path, "<yaml>", f"more than {MAX_NODES} YAML nodes", _line(ev.start_mark))
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise YAMLInputError(path, "<yaml>", f"nested deeper than {MAX_DEPTH} levels", _line(ev.start_mark))
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1


def _children(node):
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    return []


def _measure(path, root) -> tuple[int, int]:
    """(nodes, depth) of the tree with every alias expanded, without expanding it:
    an iterative post-order walk with one memo entry per distinct node."""
    size: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = [size[id(c)] for c in _children(node)]
            n = 1 + sum(k[0] for k in kids)
            d = 0 if isinstance(node, yaml.ScalarNode) else 1 + max((k[1] for k in kids), default=0)
            if n > MAX_NODES:
                raise YAMLInputError(path, "<yaml>", f"aliases expand to more than {MAX_NODES} YAML nodes",
                                     _line(node.start_mark))
            if d > MAX_DEPTH:
                raise YAMLInputError(path, "<yaml>", f"aliases expand to nesting deeper than {MAX_DEPTH} levels",
                                     _line(node.start_mark))
            size[nid] = (n, d)
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise YAMLInputError(path, "<yaml>", "an anchor is used inside itself (recursive alias)", _line(node.start_mark))
        on_path.add(nid)
        stack.append((node, True))
        for c in _children(node):
            if id(c) in on_path:
                raise YAMLInputError(path, "<yaml>", "an anchor is used inside itself (recursive alias)",
                                     _line(c.start_mark))
            if id(c) not in size:
                stack.append((c, False))
    return size[id(root)]


def _duplicates(root) -> list[tuple[str, int, int]]:
    """(key, first line, repeated line) for every repeated scalar key of every mapping."""
    out, seen_nodes, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    line = k.start_mark.line + 1
                    if k.value in first:
                        out.append((k.value, first[k.value], line))
                    else:
                        first[k.value] = line
        stack.extend(_children(node))
    return sorted(out, key=lambda t: t[2])


def load(path, *, duplicates: str = "warn") -> Loaded:
    """Read and parse one YAML file within the limits; YAMLInputError otherwise."""
    if duplicates not in ("warn", "error"):
        raise ValueError(f"duplicates must be 'warn' or 'error', not {duplicates!r}")
    text = read_text(path)
    return loads(text, path, duplicates=duplicates)


def loads(text: str, path="<yaml>", *, duplicates: str = "warn") -> Loaded:
    try:
        _scan(path, text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return Loaded(None, text)
            nodes, depth = _measure(path, node)
            warnings = []
            for key, first, again in _duplicates(node):
                msg = f"key {key!r} appears twice, at lines {first} and {again}"
                if duplicates == "error":
                    raise YAMLInputError(path, "<yaml>", msg)
                warnings.append(f"{path}: line {again}: {msg}; the last one is used")
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise _yaml_error(path, e) from None
    except RecursionError:
        raise YAMLInputError(path, "<yaml>", "nested too deeply to read") from None
    return Loaded(data, text, warnings, nodes, depth)
