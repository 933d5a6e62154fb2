"""Files that are not what a checkpoint folder holds are refused with one line
naming the file (and the tensor or field), exit 2 from the commands: never
a traceback. Headers of every malformed kind, config.json that is not a
JSON object, links that lead nowhere, a folder where a file belongs."""
import json
import os
import struct

import pytest

from harness import cli
from harness.checkpoints.load import load_checkpoint

from suites.checkpoints.corrupt import check_refuses, copy, refused

ST = "model.safetensors"


def _header(obj) -> bytes:
    h = json.dumps(obj).encode()
    return struct.pack("<Q", len(h)) + h


HEADERS = {  # name -> the bytes written over model.safetensors
    "empty file": b"",
    "shorter than its length field": b"\x10\x00\x00",
    "length beyond the file": struct.pack("<Q", 1 << 20) + b"{}",
    "length of 2^64-1": b"\xff" * 8 + b"{}",
    "header not JSON": struct.pack("<Q", 4) + b"{{{{",
    "header not UTF-8": struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc",
    "unknown dtype": _header({"w": {"dtype": "F7", "shape": [1], "data_offsets": [0, 1]}}) + b"\0",
    "offsets past the data": _header({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}) + b"\0",
    "shape and offsets disagree": _header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}) + b"\0" * 4,
    "all zeros": b"\0" * 4096,
}


@pytest.mark.parametrize("kind", list(HEADERS))
def test_a_malformed_header_names_the_file(tmp_path, capsys, kind):
    f = copy(tmp_path, "llmcompressor", "mxfp4")
    (f / ST).write_bytes(HEADERS[kind])
    check_refuses(f, capsys, str(f / ST), "safetensors")


def test_a_sparse_2gb_all_zero_shard_is_refused_without_reading_it(tmp_path, capsys):
    f = copy(tmp_path, "llmcompressor", "mxfp4")
    with open(f / "zz.safetensors", "wb") as fh:
        fh.truncate(2 << 30)  # sparse: no 2 GB written
    check_refuses(f, capsys, "zz.safetensors", "header")


def test_a_truncated_data_section_names_the_file(tmp_path, capsys):
    f = copy(tmp_path, "quark", "mxfp6_e2m3")
    b = (f / ST).read_bytes()
    (f / ST).write_bytes(b[: len(b) - 1000])
    check_refuses(f, capsys, str(f / ST))


CONFIGS = {
    "invalid JSON": (b'{"model_type": ', "valid JSON"),
    "not UTF-8": (b'{"a": "\xff"}', "UTF-8"),
    "a list": (b"[1, 2]", "a JSON object, got a list"),
    "quantization_config a string": (b'{"quantization_config": "nvfp4"}', "quantization_config"),
    "quantization_config a list": (b'{"quantization_config": [1]}', "quantization_config"),
}


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_a_config_that_is_not_a_json_object_is_refused(tmp_path, capsys, kind):
    raw, needle = CONFIGS[kind]
    f = copy(tmp_path, "modelopt", "nvfp4")
    (f / "config.json").write_bytes(raw)
    check_refuses(f, capsys, "config.json", needle)


@pytest.mark.parametrize("field,value", [
    ("config_groups", "x"), ("config_groups", {"g": "x"}), ("global_quant_config", [1]), ("export", "x"),
])
def test_config_sections_of_the_wrong_type_are_refused(tmp_path, capsys, field, value):
    producer, scheme = ("quark", "mxfp4") if field in ("global_quant_config", "export") else ("llmcompressor", "nvfp4")
    f = copy(tmp_path, producer, scheme, config=lambda q: q.update({field: value}))
    check_refuses(f, capsys, "config.json", field)


def test_links_that_lead_nowhere_are_refused(tmp_path, capsys):
    f = copy(tmp_path, "gpt-oss", "mxfp4")
    os.symlink("missing.bin", f / "zz-dangling.safetensors")
    check_refuses(f, capsys, "zz-dangling.safetensors", "dangling")
    os.unlink(f / "zz-dangling.safetensors")
    os.symlink("zz-loop.safetensors", f / "zz-loop.safetensors")
    check_refuses(f, capsys, "zz-loop.safetensors", "loop")
    os.unlink(f / "zz-loop.safetensors")
    os.rename(f / "config.json", f / "real-config.json")
    os.symlink("config.json", f / "config.json")
    check_refuses(f, capsys, "config.json", "loop")


def test_a_folder_named_like_a_shard_is_refused(tmp_path, capsys):
    f = copy(tmp_path, "gpt-oss", "mxfp4")
    (f / "extra.safetensors").mkdir()
    check_refuses(f, capsys, "extra.safetensors", "got a folder")


def test_a_folder_that_is_not_a_checkpoint_is_refused(tmp_path, capsys):
    check_refuses(tmp_path / "absent", capsys, "absent", "missing")
    (tmp_path / "file").write_text("x")
    check_refuses(tmp_path / "file", capsys, "got a file")
    (tmp_path / "empty").mkdir()
    check_refuses(tmp_path / "empty", capsys, "config.json")


def test_an_unknown_expected_format_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["checkpoint", "check", str(tmp_path), "--expect", "bogus"])
    assert e.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err


def test_synth_out_naming_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    rc = cli.main(["checkpoint", "synth", "--shape", "tiny-moe", "--scheme", "nvfp4", "--out", str(tmp_path / "f"),
                   "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "not a folder" in err, err


def test_synth_writes_a_folder_that_loads_and_leaves_no_temporary(tmp_path, capsys):
    rc = cli.main(["checkpoint", "synth", "--shape", "tiny-moe", "--scheme", "nvfp4", "--out", str(tmp_path / "s"),
                   "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    load_checkpoint(tmp_path / "s")


def test_make_into_an_unwritable_cache_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("MOE_HARNESS_CACHE_DIR", str(tmp_path / "file" / "cache"))
    rc = cli.main(["checkpoint", "make", "--producer", "gpt-oss", "--scheme", "mxfp4"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "cannot write the cache" in err, err


def test_refused_folder_loads_nothing(tmp_path):
    f = copy(tmp_path, "gpt-oss", "mxfp4")
    (f / "config.json").write_text("[]")
    refused(f, "config.json")
