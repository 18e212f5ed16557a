"""``python -m benchmarks.roofline_probe``: time the roofline's key shapes on this machine's accelerator (or its CPU)
and write them beside the roofline's predictions for the hardware named, so a GPU host can check
``conf/hardware/<name>.yaml``'s efficiency factors against its own silicon.

Shapes (one decoder layer of ``--model``, timed and multiplied by the model's layer count, TP 1):

- prefill chunk: ``--chunk`` new tokens (512) attending causally to themselves and to a prefix of P tokens
  (``--prefixes``, 0 ... 16k): the roofline's ``prefill_time_s(chunk, (P + chunk)^2 - P^2)``, the cost Mooncake's
  chunked prefill over long cached prefixes turns on;
- decode step: B sequences (``--batches``, 1 ... 256) each over ``--decode-context`` tokens of context: the
  roofline's ``decode_step_time_s(B, B * context)``.

The layer is Llama-shaped (QKV and output projections, grouped-query attention through PyTorch's
``scaled_dot_product_attention``, a gated MLP of ``intermediate_size``), in bf16 on a GPU and fp32 on a CPU.
Times are the median of ``--repeats`` after ``--warmup`` runs (CUDA events on a GPU). Writes ``--out`` (CSV:
shape, size, measured_ms, roofline_ms, measured / roofline) and ``<out>.json`` (device, torch, dtype, model,
hardware, date, the arguments). Nothing is judged here: the CSV is the measurement.

    python -m benchmarks.roofline_probe --model llama3_70b --hardware h100_80gb --out probe.csv
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from systems.config import ModelConfig
from systems.hardware_catalog import load_hardware
from systems.sim.perf.base import InstanceShape
from systems.sim.perf.roofline import RooflineModel

DEFAULT_PREFIXES = (0, 1024, 2048, 4096, 8192, 16384)
DEFAULT_BATCHES = (1, 8, 32, 64, 128, 256)


@dataclass(frozen=True)
class ProbeRow:
    """One timed shape: what it is, its size, the measured and predicted whole-model time."""

    shape: str  # prefill_chunk | decode_step
    size: int  # the prefix length (prefill) or the batch (decode)
    tokens: int  # new tokens of the iteration
    context: int  # tokens attended to per new token at most
    measured_ms: float
    roofline_ms: float

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.roofline_ms if self.roofline_ms > 0 else float("nan")


def load_model(name: str) -> ModelConfig:
    from benchmarks.perf_model_accuracy import load_model as load

    return load(name)


class Layer:
    """The weights of one Llama-shaped decoder layer on ``device`` in ``dtype`` (random: only time matters)."""

    def __init__(self, torch: Any, model: ModelConfig, device: str, dtype: Any) -> None:
        self.torch, self.model = torch, model
        h, d = model.hidden_size, model.head_dim
        q, kv = model.num_attention_heads * d, model.num_kv_heads * d

        def make(*shape: int) -> Any:
            return torch.randn(*shape, device=device, dtype=dtype) * 0.02

        self.w_qkv, self.w_o = make(h, q + 2 * kv), make(q, h)
        self.w_up, self.w_down = make(h, 2 * model.intermediate_size), make(model.intermediate_size, h)
        self.device, self.dtype = device, dtype

    def attention(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        f = self.torch.nn.functional
        groups = self.model.num_attention_heads // self.model.num_kv_heads
        try:
            return f.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=groups > 1)
        except TypeError:  # a torch without enable_gqa: expand the KV heads
            return f.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                                  attn_mask=mask)

    def forward(self, x: Any, k_cache: Any, v_cache: Any, mask: Any) -> Any:
        """``x``: [batch, new, hidden]; caches: [batch, kv_heads, past, head_dim]; returns [batch, new, hidden]."""
        m, torch = self.model, self.torch
        b, n, _ = x.shape
        d, heads, kvh = m.head_dim, m.num_attention_heads, m.num_kv_heads
        qkv = x @ self.w_qkv
        q = qkv[..., :heads * d].view(b, n, heads, d).transpose(1, 2)
        k = qkv[..., heads * d:(heads + kvh) * d].view(b, n, kvh, d).transpose(1, 2)
        v = qkv[..., (heads + kvh) * d:].view(b, n, kvh, d).transpose(1, 2)
        k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        o = self.attention(q, k, v, mask).transpose(1, 2).reshape(b, n, heads * d) @ self.w_o
        x = x + o
        gate, up = (x @ self.w_up).chunk(2, dim=-1)
        return x + (torch.nn.functional.silu(gate) * up) @ self.w_down


def _timer(torch: Any, device: str) -> Callable[[Callable[[], Any], int, int], float]:
    def run(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            if device.startswith("cuda"):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return run


def probe(model: ModelConfig, roofline: RooflineModel, device: str, chunk: int, prefixes: tuple[int, ...],
          batches: tuple[int, ...], decode_context: int, warmup: int, repeats: int) -> list[ProbeRow]:
    """Time every shape on ``device`` (one layer x the model's layers) beside the roofline's whole-model time."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    layer = Layer(torch, model, device, dtype)
    timed = _timer(torch, device)
    kvh, d, h = model.num_kv_heads, model.head_dim, model.hidden_size
    rows = []
    with torch.inference_mode():
        for prefix in prefixes:
            x = torch.randn(1, chunk, h, device=device, dtype=dtype)
            kc, vc = (torch.randn(1, kvh, prefix, d, device=device, dtype=dtype) for _ in range(2))
            keys = torch.arange(prefix + chunk, device=device)
            mask = keys[None, :] <= (prefix + torch.arange(chunk, device=device))[:, None]  # causal, after the prefix
            ms = timed(lambda x=x, kc=kc, vc=vc, mask=mask: layer.forward(x, kc, vc, mask), warmup, repeats)
            predicted = roofline.prefill_time_s(chunk, float((prefix + chunk) ** 2 - prefix**2), 1) * 1e3
            rows.append(ProbeRow("prefill_chunk", prefix, chunk, prefix + chunk, ms * model.num_layers, predicted))
        for batch in batches:
            x = torch.randn(batch, 1, h, device=device, dtype=dtype)
            kc, vc = (torch.randn(batch, kvh, decode_context, d, device=device, dtype=dtype) for _ in range(2))
            ms = timed(lambda x=x, kc=kc, vc=vc: layer.forward(x, kc, vc, None), warmup, repeats)
            predicted = float(roofline.decode_step_time_s(batch, float(batch * decode_context))) * 1e3
            rows.append(ProbeRow("decode_step", batch, batch, decode_context + 1, ms * model.num_layers, predicted))
            del kc, vc
    return rows


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return str(torch.cuda.get_device_name(torch.device(device)))
    from systems.sim.perf.profile_file import host_cpu_model

    return host_cpu_model()


def write_results(rows: list[ProbeRow], out: Path, provenance: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["shape,size,tokens,context,measured_ms,roofline_ms,measured_over_roofline"]
    lines += [f"{r.shape},{r.size},{r.tokens},{r.context},{r.measured_ms:.4f},{r.roofline_ms:.4f},{r.ratio:.4f}"
              for r in rows]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out.with_suffix(out.suffix + ".json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roofline_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3_70b", help="a conf/model name (its layer shape is timed)")
    parser.add_argument("--hardware", default="h100_80gb", help="the conf/hardware name whose roofline to compare")
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--prefixes", type=_ints, default=DEFAULT_PREFIXES)
    parser.add_argument("--batches", type=_ints, default=DEFAULT_BATCHES)
    parser.add_argument("--decode-context", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("roofline_probe.csv"))
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        parser.error("PyTorch is not installed (pip install torch)")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {device}: no CUDA device is available here")
    try:
        model, hardware = load_model(args.model), load_hardware(args.hardware)
        roofline = RooflineModel(model, hardware, InstanceShape(hardware.name, 1, 1))
    except (ValueError, FileNotFoundError) as exc:
        parser.error(f"--model {args.model} --hardware {args.hardware}: {exc}")
    start = time.perf_counter()
    rows = probe(model, roofline, device, args.chunk, args.prefixes, args.batches, args.decode_context,
                 args.warmup, args.repeats)
    provenance = {"device": device, "device_name": device_name(device), "torch": torch.__version__,
                  "dtype": "bfloat16" if device.startswith("cuda") else "float32", "model": model.name,
                  "hardware": hardware.name, "date": datetime.now(UTC).isoformat(timespec="seconds"),
                  "wall_s": round(time.perf_counter() - start, 2),
                  "args": {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items()}}
    write_results(rows, args.out, provenance)
    print(f"{provenance['device_name']} ({device}), {model.name}, roofline of {hardware.name}; "
          f"{provenance['wall_s']} s")
    print(f"{'shape':<14}{'size':>7}{'measured ms':>14}{'roofline ms':>14}{'ratio':>8}")
    for r in rows:
        print(f"{r.shape:<14}{r.size:>7}{r.measured_ms:>14.3f}{r.roofline_ms:>14.3f}{r.ratio:>8.2f}")
    print(f"wrote {args.out} and {args.out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
