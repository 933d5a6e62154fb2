"""Implementations by name (entry points, module:object, in-process), skipped
with a reason when unavailable; the divergence registry's validation."""
from importlib import metadata

import pytest
import torch

import harness.formats as hf
from harness.conformance import Implementation, Unavailable, get_implementation, registry, run_conformance
from harness.conformance import divergences as dv


def _fake_entry_points(monkeypatch, eps):
    real = metadata.entry_points

    def fake(**kw):
        if kw.get("group") == registry.GROUP:
            return [metadata.EntryPoint(name=n, value=v, group=registry.GROUP) for n, v in eps.items()]
        return real(**kw)

    monkeypatch.setattr(registry.metadata, "entry_points", fake)


def test_entry_point_discovery(monkeypatch):
    _fake_entry_points(monkeypatch, {"my-kernel": "suites.conformance.planted:ties_away"})
    assert "my-kernel" in registry.available_names()
    assert get_implementation("my-kernel").name == "ties-away"


def test_unknown_name_did_you_mean(monkeypatch):
    _fake_entry_points(monkeypatch, {"my-kernel": "suites.conformance.planted:ties_away"})
    with pytest.raises(ValueError, match="did you mean 'my-kernel'"):
        get_implementation("my-kernal")


def test_entry_point_that_does_not_import_is_unavailable(monkeypatch):
    _fake_entry_points(monkeypatch, {"broken": "no_such_package_xyz:impl"})
    with pytest.raises(Unavailable, match="no_such_package_xyz"):
        get_implementation("broken")


def test_unavailable_factory_is_skipped_with_reason(monkeypatch):
    def factory():
        raise Unavailable("package foo is not installed")

    monkeypatch.setattr(registry, "_REGISTERED", {})
    registry.register_implementation("needs-foo", factory)
    data = run_conformance(["needs-foo"], formats=["mxfp4"])
    assert data["skipped"] == [{"name": "needs-foo", "reason": "package foo is not installed"}]
    assert data["cells"] == [] and not data["failed"]


def test_device_not_declared_is_skipped():
    impl = Implementation(name="cuda-only", devices=("cuda",), qdq=lambda *a: None)
    data = run_conformance([impl], formats=["mxfp4"])
    assert data["skipped"][0]["name"] == "cuda-only" and "cpu" in data["skipped"][0]["reason"]


def test_protocol_rejects_bad_declarations():
    with pytest.raises(ValueError, match="unknown formats"):
        Implementation(name="x", formats=("mxfp5",), qdq=lambda *a: None)
    with pytest.raises(ValueError, match="provides none"):
        Implementation(name="x")
    with pytest.raises(ValueError, match="conventions.global_scale"):
        Implementation(name="x", conventions={"global_scale": "both"}, qdq=lambda *a: None)
    with pytest.raises(ValueError, match="global_scales"):
        Implementation(name="x", global_scales=(16.0, 0.0), qdq=lambda *a: None)


def test_malformed_output_is_a_cell_error_not_a_crash():
    impl = Implementation(name="wrong-shape", formats=("mxfp4",), scale_modes=("floor",),
                          input_dtypes=(torch.float32,), qdq=lambda x, *a: x[:, :32])
    data = run_conformance([impl], random_blocks=4)
    assert data["failed"]
    assert "shape" in data["cells"][0]["stages"]["qdq"]["error"]


def test_shipped_registry_loads_and_every_entry_names_a_predicate():
    entries = dv.load_registry()
    assert len(entries) >= 4 and all(e.match in dv.PREDICATES for e in entries)


@pytest.mark.parametrize("text,msg", [
    ("- {id: a, implementation: x, versions: '>=1', scale_kind: e8m0, stages: [codes], match: nope, explanation: e}",
     "match 'nope' is not a predicate"),
    ("- {id: a, implementation: x, versions: '>=1', scale_kind: e8m0, stages: [codez], match: block_has_inf, explanation: e}",
     "unknown stages"),
    ("- {id: a, implementation: x, scale_kind: e8m0, stages: [codes], match: block_has_inf, explanation: e}",
     "missing field"),
    ("- {id: a, implementation: x, versions: 'one', scale_kind: e8m0, stages: [codes], match: block_has_inf, explanation: e}",
     "PEP 440"),
])
def test_registry_validation(tmp_path, text, msg):
    p = tmp_path / "reg.yaml"
    p.write_text(text + "\n")
    with pytest.raises(ValueError, match=msg):
        dv.load_registry(p)


def test_registry_entry_respects_version_range():
    entry = next(e for e in dv.load_registry() if e.match == "block_has_inf")
    case = dv.BlockCase(xs=[float("inf")] + [0.0] * 31, fmt="mxfp4", mode="floor", rounding="rne",
                        dtype=torch.float32, gs=None, stage="scales", ref_scale=255)
    assert entry.applies(entry.implementation, "0.18.0", case)
    assert not entry.applies(entry.implementation, "0.19.0", case)
    assert not entry.applies("someone-else", "0.18.0", case)
    assert hf.FORMATS["mxfp4"].scale_kind == entry.scale_kind


def test_shipped_adapter_missing_its_package_is_skipped_not_dropped(monkeypatch):
    """quark-mx where amd-quark (or onnx, which quark.torch imports) is missing:
    listed as skipped with the import error (the package is hidden here, so
    the path is exercised whether or not it is installed; the adapter's own
    tests in test_installed_adapters.py run it where it is)."""
    import sys

    monkeypatch.setitem(sys.modules, "quark", None)  # `import quark` raises ImportError
    data = run_conformance(["quark-mx"], formats=["mxfp4"], dtypes=(torch.float32,), random_blocks=4)
    assert data["skipped"] and data["skipped"][0]["name"] == "quark-mx"
    assert "does not import" in data["skipped"][0]["reason"] and "quark" in data["skipped"][0]["reason"]
    assert data["cells"] == [] and not data["failed"]
