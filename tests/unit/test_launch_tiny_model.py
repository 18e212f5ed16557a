"""The locally built tiny Llama: config, weight shapes, tokenizer round trip, caching."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from systems.config import ModelConfig
from systems.launch.tiny_model import (
    DEFAULT_MODEL_YAML,
    build_tiny_llama,
    default_cache_root,
    load_model_config,
    main,
    read_safetensors_header,
    to_bf16_bits,
    weight_shapes,
)

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tiny_cfg() -> ModelConfig:
    return load_model_config(DEFAULT_MODEL_YAML)


@pytest.fixture(scope="module")
def built(tiny_cfg, tmp_path_factory):
    return build_tiny_llama(tiny_cfg, tmp_path_factory.mktemp("models"))


def test_config_json_has_the_model_shape(tiny_cfg, built):
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert cfg["num_hidden_layers"] == tiny_cfg.num_layers
    assert cfg["hidden_size"] == tiny_cfg.hidden_size
    assert cfg["num_attention_heads"] == tiny_cfg.num_attention_heads
    assert cfg["num_key_value_heads"] == tiny_cfg.num_kv_heads
    assert cfg["head_dim"] == tiny_cfg.head_dim
    assert cfg["intermediate_size"] == tiny_cfg.intermediate_size
    assert cfg["vocab_size"] == tiny_cfg.vocab_size
    assert cfg["max_position_embeddings"] == tiny_cfg.max_model_len
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)
    assert json.loads((built / "generation_config.json").read_text())["eos_token_id"] == 2
    tok_cfg = json.loads((built / "tokenizer_config.json").read_text())
    assert tok_cfg["eos_token"] == "</s>" and tok_cfg["model_max_length"] == tiny_cfg.max_model_len


def test_safetensors_shapes_and_values(tiny_cfg, built):
    header = read_safetensors_header(built / "model.safetensors")
    header.pop("__metadata__")
    expected = weight_shapes(tiny_cfg)
    assert {k: tuple(v["shape"]) for k, v in header.items()} == expected
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert expected["model.layers.0.self_attn.k_proj.weight"] == (tiny_cfg.num_kv_heads * tiny_cfg.head_dim,
                                                                   tiny_cfg.hidden_size)
    end = max(v["data_offsets"][1] for v in header.values())
    with open(built / "model.safetensors", "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
    assert (built / "model.safetensors").stat().st_size == 8 + header_len + end
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    weights = safetensors_torch.load_file(str(built / "model.safetensors"))
    assert weights["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert float(weights["model.embed_tokens.weight"].float().std()) == pytest.approx(0.02, rel=0.05)
    assert torch.all(weights["model.norm.weight"] == 1)


def test_bf16_conversion_rounds_to_nearest():
    x = np.array([1.0, -2.5, 0.0, 1.0 + 2**-9, 3.14159], dtype=np.float32)
    bits = to_bf16_bits(x)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    assert back[:3].tolist() == [1.0, -2.5, 0.0]
    assert abs(back[4] - 3.14159) < 0.01


def test_tokenizer_has_exact_vocab_and_round_trips(tiny_cfg, built):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(built / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == tiny_cfg.vocab_size
    assert [tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>")] == [0, 1, 2]
    ids = list(range(3, tiny_cfg.vocab_size, 7)) + [tiny_cfg.vocab_size - 1]
    text = tok.decode(ids)
    assert tok.encode(text, add_special_tokens=False).ids == ids
    assert tok.encode(text).ids == [1, *ids]  # a leading <s>, as Llama
    assert tok.encode("notaword").ids == [1, 0]


def test_transformers_loads_the_tokenizer(built):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(built))
    assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (1, 2, 0)
    ids = tok("ba be bi").input_ids
    assert ids[0] == 1 and tok.decode(ids, skip_special_tokens=True) == "ba be bi"


def test_build_is_cached_and_rebuilt_on_change(tiny_cfg, built):
    root = built.parent
    mtime = (built / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_llama(tiny_cfg, root) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == mtime
    wider = dataclasses.replace(tiny_cfg, intermediate_size=tiny_cfg.intermediate_size + 8)
    other = build_tiny_llama(wider, root)
    assert other != built and other.parent == root
    assert json.loads((other / "config.json").read_text())["intermediate_size"] == wider.intermediate_size
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_same_seed_same_bytes(tiny_cfg, tmp_path):
    a = build_tiny_llama(tiny_cfg, tmp_path / "a")
    b = build_tiny_llama(tiny_cfg, tmp_path / "b")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_default_cache_root_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DISAGG_BENCH_CACHE", str(tmp_path))
    assert default_cache_root() == tmp_path
    monkeypatch.delenv("DISAGG_BENCH_CACHE")
    assert default_cache_root().parts[-3:] == (".cache", "disagg-bench", "models")


def test_cli_out(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    assert main(["--out", str(out)]) == 0  # up to date
    (tmp_path / "other").mkdir()
    assert main(["--out", str(tmp_path / "other")]) == 2  # refuses to overwrite a foreign folder


def test_bad_special_ids_rejected(tiny_cfg, tmp_path):
    with pytest.raises(ValueError, match="special_token_ids"):
        build_tiny_llama(dataclasses.replace(tiny_cfg, special_token_ids=[0, 1]), tmp_path)
