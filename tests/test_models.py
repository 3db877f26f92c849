"""A model's GEMMs as shapes (harness.models): config.json written here, presets, TP, roles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ShapeError
from harness.models import layer_gemms, load_config_json, model_spec, presets
from harness.shapes import Shape, resolve_shapes, shape_roles

REPO = Path(__file__).resolve().parent.parent


def write_config(tmp_path: Path, **over) -> Path:
    doc = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"}
    doc.update(over)
    d = tmp_path / "my-model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({k: v for k, v in doc.items() if v is not None}))
    return d / "config.json"


def test_grouped_kv_heads(tmp_path):
    dims = load_config_json(write_config(tmp_path))
    assert dims.name == "my-model" and dims.head_dim == 128
    g = dict(layer_gemms(dims, 16))
    assert g["qkv"] == Shape(16, (32 + 2 * 8) * 128, 4096)
    assert g["o"] == Shape(16, 4096, 4096)
    assert g["gate_up"] == Shape(16, 2 * 14336, 4096)
    assert g["down"] == Shape(16, 4096, 14336)
    assert g["lm_head"] == Shape(16, 128256, 4096)


def test_without_grouped_kv_heads_and_with_head_dim(tmp_path):
    path = write_config(tmp_path, num_key_value_heads=None, head_dim=96, hidden_size=3072,
                        num_attention_heads=32, intermediate_size=8192, vocab_size=32064)
    g = dict(layer_gemms(load_config_json(path), 8))
    assert g["qkv"] == Shape(8, 3 * 32 * 96, 3072)      # every head has its own K and V
    assert g["o"] == Shape(8, 3072, 32 * 96)


def test_tensor_parallel_shards_each_rank(tmp_path):
    dims = load_config_json(write_config(tmp_path))
    g = dict(layer_gemms(dims, 128, tp=4))
    assert g["qkv"] == Shape(128, (8 + 2 * 2) * 128, 4096)
    assert g["o"] == Shape(128, 4096, 8 * 128)
    assert g["gate_up"] == Shape(128, 2 * 3584, 4096)
    assert g["down"] == Shape(128, 4096, 3584)
    assert g["lm_head"] == Shape(128, 32064, 4096)
    g16 = dict(layer_gemms(dims, 1, tp=16))              # more ranks than KV heads: one KV head each
    assert g16["qkv"] == Shape(1, (2 + 2 * 1) * 128, 4096)
    with pytest.raises(ShapeError, match="tensor-parallel"):
        layer_gemms(dims, 16, tp=3)


def test_spec_with_tokens_and_roles(tmp_path):
    path = write_config(tmp_path)
    shapes = resolve_shapes([str(path)], tokens=[16, 2048])
    assert len(shapes) == 10 and Shape(2048, 128256, 4096) in shapes
    roles = shape_roles(f"{path}@16@tp2")
    assert roles[Shape(16, 3072, 4096)] == "my-model qkv t16 tp2"
    assert roles[Shape(16, 4096, 2048)] == "my-model o t16 tp2"


def test_presets_match_their_public_configs():
    p = presets()
    assert {"llama-3-8b", "llama-3-70b", "qwen2.5-7b", "mistral-7b"} <= set(p)
    q = dict(layer_gemms(p["qwen2.5-7b"], 16))
    assert q["qkv"] == Shape(16, 4608, 3584) and q["gate_up"] == Shape(16, 37888, 3584)
    assert q["down"] == Shape(16, 3584, 18944) and q["lm_head"] == Shape(16, 152064, 3584)
    assert dict(layer_gemms(p["llama-3-70b"], 16, tp=8))["qkv"] == Shape(16, 1280, 8192)
    assert model_spec("Llama-3-8B") is not None and model_spec("4096x4096x4096") is None


def test_committed_shapes_files_are_the_presets():
    from harness.models import shapes_file_text

    for name in ("llama-3-8b", "qwen2.5-7b"):
        f = REPO / "results" / "h200" / f"shapes-{name}.txt"
        assert f.read_text() == shapes_file_text(model_spec(name, [16, 128, 512, 4096]))
        roles = shape_roles(str(f))
        assert len(roles) == 20 and all(r.startswith(name) for r in roles.values())


@pytest.mark.parametrize("content", [b"[1, 2]", b"{\"hidden_size\": \"4096\"}", b"\xff", b"{" * 10])
def test_a_bad_config_is_one_line(tmp_path, content):
    p = tmp_path / "config.json"
    p.write_bytes(content)
    with pytest.raises(ShapeError) as e:
        resolve_shapes([str(p)])
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_cli_error_is_one_line(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 4096}))
    r = subprocess.run([sys.executable, "-m", "harness", "models", str(p)], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
