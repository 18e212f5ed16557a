"""A tiny Llama checkpoint built locally (random weights, synthetic tokenizer); never downloads anything.

``build_tiny_llama(model_cfg, cache_root)`` writes a ``LlamaForCausalLM`` folder that vLLM and
transformers load: ``config.json`` with the shape of ``model_cfg``, seeded random bf16 weights in
``model.safetensors``, a word-level tokenizer over exactly ``vocab_size`` ids built with the
``tokenizers`` library, ``tokenizer_config.json``, ``special_tokens_map.json`` and
``generation_config.json``. The folder name holds a hash of the architecture, the seed and the
builder version, so a changed config builds a new folder; a build happens in a temporary folder
that is renamed into place, so a folder that exists is complete.

Tokenizer: ``model_cfg.special_token_ids`` (default ``[0, 1, 2]``) are ``<unk>``, ``<s>``, ``</s>``;
every other id is a synthetic word with no whitespace in it, so ``decode`` then ``encode`` gives the
ids back. Text encodes with a leading ``<s>``, as Llama's tokenizer does.

CLI: ``python -m systems.launch.tiny_model --out DIR [--model conf/model/tiny_llama.yaml]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import struct
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import numpy as np

from systems.config import ModelConfig

logger = logging.getLogger(__name__)

BUILDER_VERSION = 1  # bump when the files written change, so cached folders are rebuilt
DEFAULT_SEED = 0
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
ARCH_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
               "intermediate_size", "vocab_size", "max_model_len", "special_token_ids")
INFO_FILE = "build_info.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_YAML = REPO_ROOT / "conf" / "model" / "tiny_llama.yaml"
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def default_cache_root() -> Path:
    """``$DISAGG_BENCH_CACHE`` when set, else ``~/.cache/disagg-bench/models``."""
    env = os.environ.get("DISAGG_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "disagg-bench" / "models"


def architecture(model_cfg: ModelConfig, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """The fields that determine the checkpoint's content (what the cache key hashes)."""
    arch = {key: getattr(model_cfg, key) for key in ARCH_FIELDS}
    arch["special_token_ids"] = list(_special_ids(model_cfg))
    arch["seed"] = seed
    arch["builder_version"] = BUILDER_VERSION
    return arch


def architecture_hash(model_cfg: ModelConfig, seed: int = DEFAULT_SEED) -> str:
    """Short sha256 of ``architecture``; part of the cached folder's name."""
    blob = json.dumps(architecture(model_cfg, seed), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _special_ids(model_cfg: ModelConfig) -> tuple[int, int, int]:
    ids = tuple(model_cfg.special_token_ids) or (0, 1, 2)
    if len(ids) != 3 or len(set(ids)) != 3 or not all(0 <= i < model_cfg.vocab_size for i in ids):
        raise ValueError(f"model.special_token_ids: need 3 distinct ids in [0, vocab_size) for "
                         f"{', '.join(SPECIAL_TOKENS)}; got {list(model_cfg.special_token_ids)}")
    return ids  # type: ignore[return-value]


# ----------------------------------------------------------------------------- config files

def hf_config(model_cfg: ModelConfig) -> dict[str, Any]:
    """``config.json`` of a LlamaForCausalLM with the shape of ``model_cfg``."""
    _, bos, eos = _special_ids(model_cfg)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model_cfg.hidden_size,
        "intermediate_size": model_cfg.intermediate_size,
        "num_hidden_layers": model_cfg.num_layers,
        "num_attention_heads": model_cfg.num_attention_heads,
        "num_key_value_heads": model_cfg.num_kv_heads,
        "head_dim": model_cfg.head_dim,
        "vocab_size": model_cfg.vocab_size,
        "max_position_embeddings": model_cfg.max_model_len,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def generation_config(model_cfg: ModelConfig) -> dict[str, Any]:
    _, bos, eos = _special_ids(model_cfg)
    return {"bos_token_id": bos, "eos_token_id": eos}


def tokenizer_config(model_cfg: ModelConfig) -> dict[str, Any]:
    unk, bos, eos = _special_ids(model_cfg)
    added = {str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True}
             for i, tok in zip((unk, bos, eos), SPECIAL_TOKENS, strict=True)}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": model_cfg.max_model_len,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
        # Enough for /v1/chat/completions: the messages' contents, space-separated.
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }


# ----------------------------------------------------------------------------- tokenizer

def synthetic_word(index: int) -> str:
    """The ``index``-th synthetic word (bijective numbering over consonant-vowel syllables)."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    base = len(syllables)
    n = index + 1
    parts: list[str] = []
    while n > 0:
        n, rem = divmod(n - 1, base)
        parts.append(syllables[rem])
    return "".join(reversed(parts))


def vocabulary(model_cfg: ModelConfig) -> dict[str, int]:
    """Token -> id for all ``vocab_size`` ids: the three special tokens, then synthetic words."""
    specials = dict(zip(SPECIAL_TOKENS, _special_ids(model_cfg), strict=True))
    vocab = dict(specials)
    taken = set(specials.values())
    word = 0
    for token_id in range(model_cfg.vocab_size):
        if token_id in taken:
            continue
        vocab[synthetic_word(word)] = token_id
        word += 1
    return vocab


def build_tokenizer(model_cfg: ModelConfig) -> Any:
    """A ``tokenizers.Tokenizer``: whitespace-split word level, unknown words -> ``<unk>``, ``<s>`` first."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    _, bos, _ = _special_ids(model_cfg)
    tok = Tokenizer(models.WordLevel(vocab=vocabulary(model_cfg), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # WordPiece's decoder with an unused prefix joins words with single spaces.
    tok.decoder = decoders.WordPiece(prefix="\x00##", cleanup=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)])
    return tok


# ----------------------------------------------------------------------------- weights

def weight_shapes(model_cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of the LlamaForCausalLM checkpoint."""
    h, i, v = model_cfg.hidden_size, model_cfg.intermediate_size, model_cfg.vocab_size
    q = model_cfg.num_attention_heads * model_cfg.head_dim
    kv = model_cfg.num_kv_heads * model_cfg.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for layer in range(model_cfg.num_layers):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        })
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (v, h)
    return shapes


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def random_weights(model_cfg: ModelConfig, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """Seeded random weights as bf16 bit patterns: N(0, 0.02) matrices, RMSNorm weights of 1."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    weights: dict[str, np.ndarray] = {}
    for name, shape in weight_shapes(model_cfg).items():
        if name.endswith("norm.weight"):
            values = np.ones(shape, dtype=np.float32)
        else:
            values = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        weights[name] = to_bf16_bits(values)
    return weights


def write_safetensors_bf16(path: Path, tensors: Mapping[str, np.ndarray],
                           metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write uint16 arrays holding bf16 bits as a ``.safetensors`` file (8-byte header size, JSON, data)."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, array in tensors.items():
        if array.dtype != np.uint16:
            raise TypeError(f"{name}: expected uint16 bf16 bit patterns, got {array.dtype}")
        size = array.size * 2
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array).astype("<u2", copy=False).tobytes())


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a ``.safetensors`` file (names, dtypes, shapes, offsets)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


# ----------------------------------------------------------------------------- building

def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_checkpoint(model_cfg: ModelConfig, out_dir: Path, seed: int = DEFAULT_SEED) -> None:
    """Write every file of the checkpoint into the existing folder ``out_dir``."""
    _write_json(out_dir / "config.json", hf_config(model_cfg))
    _write_json(out_dir / "generation_config.json", generation_config(model_cfg))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config(model_cfg))
    _write_json(out_dir / "special_tokens_map.json",
                {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"})
    build_tokenizer(model_cfg).save(str(out_dir / "tokenizer.json"))
    write_safetensors_bf16(out_dir / "model.safetensors", random_weights(model_cfg, seed))
    # Written last: its presence with the right hash marks a complete, current build.
    _write_json(out_dir / INFO_FILE, {"hash": architecture_hash(model_cfg, seed),
                                      "architecture": architecture(model_cfg, seed),
                                      "name": model_cfg.name})


def is_current(model_cfg: ModelConfig, folder: Path, seed: int = DEFAULT_SEED) -> bool:
    """Whether ``folder`` holds a complete build of exactly this architecture and seed."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
    except (OSError, ValueError):
        return False
    return info.get("hash") == architecture_hash(model_cfg, seed)


def write_tiny_llama(model_cfg: ModelConfig, out_dir: Path, seed: int = DEFAULT_SEED,
                     force: bool = False) -> Path:
    """Build the checkpoint at exactly ``out_dir`` (atomically: a temporary sibling is renamed).

    Returns ``out_dir`` at once when it already holds this build. An ``out_dir`` holding anything
    else is an error unless ``force`` (then it is replaced).
    """
    out_dir = Path(out_dir)
    if is_current(model_cfg, out_dir, seed):
        logger.debug("tiny model up to date at %s", out_dir)
        return out_dir
    if out_dir.exists() and not force:
        raise FileExistsError(f"{out_dir} exists and is not a build of this model; "
                              f"remove it or pass force=True (--force)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write_checkpoint(model_cfg, tmp, seed)
        if out_dir.exists() and force:
            shutil.rmtree(out_dir)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not is_current(model_cfg, out_dir, seed):  # not just a concurrent builder that won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("built tiny model %s at %s", model_cfg.name, out_dir)
    return out_dir


def build_tiny_llama(model_cfg: ModelConfig, cache_root: Optional[Path] = None,
                     seed: int = DEFAULT_SEED) -> Path:
    """The cached checkpoint folder for ``model_cfg``, built on first use.

    ``cache_root`` defaults to ``model_cfg.path`` when set, else ``default_cache_root()``.
    """
    if cache_root is None:
        cache_root = Path(model_cfg.path) if model_cfg.path else default_cache_root()
    folder = Path(cache_root).expanduser() / f"{model_cfg.name}-{architecture_hash(model_cfg, seed)}"
    return write_tiny_llama(model_cfg, folder, seed)


def load_model_config(path: Path) -> ModelConfig:
    """A ``conf/model/*.yaml`` file, checked against the ``ModelConfig`` schema."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(path))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m systems.launch.tiny_model", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help="write the checkpoint into exactly this folder")
    where.add_argument("--cache-root", type=Path, help="build into the cache under this root (default: "
                       "$DISAGG_BENCH_CACHE or ~/.cache/disagg-bench/models)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_YAML, help="model YAML (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--force", action="store_true", help="replace --out if it holds something else")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    model_cfg = load_model_config(args.model)
    try:
        if args.out is not None:
            folder = write_tiny_llama(model_cfg, args.out, args.seed, force=args.force)
        else:
            folder = build_tiny_llama(model_cfg, args.cache_root, args.seed)
    except (FileExistsError, ValueError) as exc:
        logger.error("%s", exc)
        return 2
    sys.stdout.write(f"{folder}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
