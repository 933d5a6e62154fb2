"""Hypothesis: malformed eval configs and pipelines, made by mutating the shipped
ones (suites/lm_eval/configs/*.yaml, buildkite/*.yml), are refused by the CLI
with exit 2 and one line naming the file -- never a traceback -- and the work
done per file is bounded (YAML objects built), not just its time.

The CLI runs in process (harness.cli.main), so each example costs milliseconds.
"""

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from harness import cli
from harness.util import safe_yaml
from suites.hostile_yaml import alias_bomb

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "suites" / "lm_eval" / "configs").glob("*.yaml"))
PIPELINES = sorted((REPO / "buildkite").glob("*.yml"))
assert CONFIGS and PIPELINES


# ---- running the CLI and judging its answer

class Counter:
    """YAML objects built while the CLI ran: the work done on one input."""

    def __init__(self):
        self.built = 0
        self._real = yaml.constructor.BaseConstructor.construct_object

    def __enter__(self):
        real = self._real

        def counting(loader, node, deep=False):
            self.built += 1
            return real(loader, node, deep)

        self._patch = mock.patch.object(yaml.constructor.BaseConstructor, "construct_object", counting)
        self._patch.__enter__()
        return self

    def __exit__(self, *exc):
        self._patch.__exit__(*exc)


def run_cli(argv) -> tuple[int, str, int]:
    out, err = io.StringIO(), io.StringIO()
    with Counter() as work, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, out.getvalue() + err.getvalue(), work.built


def assert_refused(argv, path: Path):
    rc, text, built = run_cli(argv)
    assert "Traceback" not in text
    assert rc == 2, (rc, text)
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("warning:", "note:"))]
    assert len(lines) == 1, text
    assert str(path) in lines[0], text
    assert built <= safe_yaml.MAX_NODES, built   # an expanded bomb would build far more


def eval_argv(path):
    return ["eval", "--config", str(path), "--dry-run"]


def pipeline_argv(path):
    return ["pipeline", "validate", str(path)]


def write(data: bytes, suffix: str) -> tuple[tempfile.TemporaryDirectory, Path]:
    d = tempfile.TemporaryDirectory()
    p = Path(d.name) / f"input{suffix}"
    p.write_bytes(data)
    return d, p


# ---- a serializer that can repeat a key (yaml.safe_dump cannot), one key per line

def dump(obj, dup=None, indent=0) -> str:
    """JSON text (valid YAML); the mapping whose id() is `dup` gets its first key written twice."""
    pad = " " * indent
    if isinstance(obj, dict):
        items = list(obj.items())
        if id(obj) == dup and items:
            items.append(items[0])
        if not items:
            return "{}"
        body = ",\n".join(f"{pad} {json.dumps(str(k))}: {dump(v, dup, indent + 1)}" for k, v in items)
        return "{\n" + body + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        return "[\n" + ",\n".join(pad + " " + dump(v, dup, indent + 1) for v in obj) + "\n" + pad + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        return ".nan" if math.isnan(obj) else (".inf" if obj > 0 else "-.inf")
    if isinstance(obj, float):
        mantissa, e, exp = repr(obj).partition("e")
        return mantissa + ("" if "." in mantissa or not e else ".0") + e + exp  # YAML 1.1 reads 2e-06 as text
    return json.dumps(obj)


def nodes(obj, path=()):
    """(path, value) of every node."""
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from nodes(v, path + (i,))


def get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _has(obj, path) -> bool:
    try:
        get(obj, path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def put(obj, path, value):
    get(obj, path[:-1])[path[-1]] = value


def nest(value, depth):
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def byte_mutation(draw, text: str) -> bytes:
    """Mutations that break the file below the YAML level."""
    raw = text.encode()
    kind = draw(st.sampled_from(["utf16", "utf32", "nul", "bad_utf8", "deep_text", "alias_bomb", "recursive",
                                 "oversize"]))
    at = draw(st.integers(0, len(raw)))
    if kind == "utf16":
        return text.encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be"])))
    if kind == "utf32":
        return text.encode("utf-32")
    if kind == "nul":
        return raw[:at] + b"\x00" + raw[at:]
    if kind == "bad_utf8":
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xe2\x82", b"\x80"])) + raw[at:]
    if kind == "deep_text":
        n = draw(st.integers(safe_yaml.MAX_DEPTH + 1, 5000))
        return raw + ("zz_deep: " + "[" * n + "]" * n + "\n").encode()
    if kind == "alias_bomb":
        return raw + (alias_bomb(draw(st.integers(6, 12))) + "zz_bomb: *a" + "6" + "\n").encode()
    if kind == "recursive":
        return raw + b"zz_loop: &loop [1, *loop]\n"
    return raw + b"# " + b"x" * (safe_yaml.MAX_BYTES + draw(st.integers(1, 1000))) + b"\n"


# ---- eval configs

# numeric fields where a huge value or a negative one is still valid (unbounded metric values)
UNBOUNDED_ABOVE = {"value", "max", "oracle_max"}
REQUIRED = [("model_name",), ("tasks",), ("tasks", 0, "name"), ("tasks", 0, "metrics"),
            ("tasks", 0, "metrics", 0, "name"), ("tasks", 0, "metrics", 0, "value")]
CHOICES = [("harness", "scheme"), ("harness", "baseline_scheme"), ("harness", "backend"), ("harness", "dtype"),
           ("harness", "gates", "paired", "method")]


CONFIG_MUTATIONS = ["number", "missing", "container", "choice", "nested", "bytes"]
PIPELINE_MUTATIONS = ["bytes", "duplicate", "steps", "top", "nested"]


@st.composite
def broken_config(draw, how):
    src = draw(st.sampled_from(CONFIGS))
    text = src.read_text()
    data = yaml.safe_load(text)
    if how == "bytes":
        return src.name, draw(byte_mutation(text))
    if how == "number":
        leaves = [(p, v) for p, v in nodes(data) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        path, _ = draw(st.sampled_from(leaves))
        bad = [math.nan, math.inf, -math.inf, "1", [1], {"a": 1}, True]
        if path[-1] not in UNBOUNDED_ABOVE:
            bad += [10**30, -1, -(10**30)]
        put(data, path, draw(st.sampled_from(bad)))
    elif how == "missing":
        path = draw(st.sampled_from(REQUIRED))
        del get(data, path[:-1])[path[-1]]
    elif how == "container":
        path = draw(st.sampled_from([p for p in [("tasks",), ("tasks", 0), ("tasks", 0, "metrics"), ("harness",),
                                                 ("harness", "gates"), ("harness", "gates", "paired")]
                                     if _has(data, p[:-1])]))
        put(data, path, draw(st.sampled_from(["x", 5, 1.5] + ([[1]] if path[-1] != "tasks" else [[]]))))
    elif how == "choice":
        path = draw(st.sampled_from([p for p in CHOICES if _has(data, p)]))
        put(data, path, draw(st.sampled_from(["warp-drive", "", 7, ["nvfp4"]])))
    else:  # a field's value buried deeper than the nesting limit
        leaves = [p for p, v in nodes(data) if p and not isinstance(v, (dict, list))]
        path = draw(st.sampled_from(leaves))
        put(data, path, nest(get(data, path), draw(st.integers(safe_yaml.MAX_DEPTH + 1, 200))))
    return src.name, dump(data).encode()


@pytest.mark.parametrize("how", CONFIG_MUTATIONS)
def test_malformed_configs_exit_2_in_one_line(how):
    @given(broken_config(how))
    def check(case):
        name, data = case
        d, path = write(data, ".yaml")
        with d:
            assert_refused(eval_argv(path), path)

    check()


@given(st.sampled_from(CONFIGS), st.data())
def test_duplicate_keys_in_configs_are_a_warning_naming_both_lines(src, draw):
    data = yaml.safe_load(src.read_text())
    maps = [v for _, v in nodes(data) if isinstance(v, dict) and v]
    target = draw.draw(st.sampled_from(maps))
    text = dump(data, dup=id(target))
    key = next(iter(target))
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.lstrip().startswith(json.dumps(str(key)) + ":")]
    d, path = write(text.encode(), ".yaml")
    with d:
        rc, out, _ = run_cli(eval_argv(path))
    assert rc == 0, out
    assert any(f"key {str(key)!r} appears twice, at lines {a} and {b}" in out
               for a in lines for b in lines if a < b), out


# ---- pipelines

@st.composite
def broken_pipeline(draw, how):
    src = draw(st.sampled_from(PIPELINES))
    text = src.read_text()
    doc = yaml.safe_load(text)
    if how == "bytes":
        return draw(byte_mutation(text))
    if how == "duplicate":
        maps = [v for _, v in nodes(doc) if isinstance(v, dict) and v]
        return dump(doc, dup=id(draw(st.sampled_from(maps)))).encode()
    if how == "steps":
        steps = doc.pop("steps")
        choice = draw(st.sampled_from(["missing", "renamed", "scalar", "mapping"]))
        if choice == "renamed":
            doc["stepz"] = steps
        elif choice == "scalar":
            doc["steps"] = draw(st.sampled_from(["x", 3, 1.5, True]))
        elif choice == "mapping":
            doc["steps"] = {"a": steps}
        return dump(doc).encode()
    if how == "top":
        return draw(st.sampled_from([b"just words\n", b"3\n", b"- - - [\n", b"steps: [\n", b"\t- a\n"]))
    i = draw(st.integers(0, len(doc["steps"]) - 1))
    doc["steps"][i] = nest(doc["steps"][i], draw(st.integers(safe_yaml.MAX_DEPTH + 1, 200)))
    return dump(doc).encode()


@pytest.mark.parametrize("how", PIPELINE_MUTATIONS)
def test_malformed_pipelines_exit_2_in_one_line(how):
    @given(broken_pipeline(how))
    def check(data):
        d, path = write(data, ".yml")
        with d:
            assert_refused(pipeline_argv(path), path)

    check()


def test_the_shipped_files_themselves_pass():
    for p in CONFIGS:
        rc, out, _ = run_cli(eval_argv(p))
        assert rc == 0, out
    for p in PIPELINES:
        rc, out, _ = run_cli(pipeline_argv(p))
        assert rc == 0, out


def test_dump_round_trips_and_marks_duplicates():
    for p in CONFIGS + PIPELINES:
        data = yaml.safe_load(p.read_text())
        assert yaml.safe_load(dump(data)) == data
    text = dump({"a": 1, "b": {"c": 2}}, dup=None)
    assert safe_yaml.loads(text).warnings == []
