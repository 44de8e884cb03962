"""Training-step throughput and memory of a small TinyGPT: fp32 vs bf16 autocast (vs fp16 + GradScaler on CUDA).

    python benchmarks/mixed_precision.py                 # the device at hand (CUDA if available)
    python benchmarks/mixed_precision.py --device cpu --steps 5

Prints one row per recipe: median ms per step, tokens/s, speed-up over fp32, and memory. "fp32" names how its matmuls
computed: "fp32 (IEEE)" is full fp32 (PyTorch's default, and always on a CPU); on a CUDA GPU that has TF32 (Ampere and
later) a second row, "fp32 (TF32)", runs the same step with ``torch.backends.cuda.matmul.fp32_precision = "tf32"``
(inputs rounded to a 10-bit mantissa, fp32 sums), as the capstone's trainer does; the speed-ups are over the IEEE row.
Memory:
- on CUDA, the measured peak (torch.cuda.max_memory_allocated during one step, above what was allocated
  before the model was built) next to the estimate below;
- everywhere, the estimate: weights + gradients + AdamW state (analytic, 16 B/param in fp32 and under
  autocast) + autocast's bf16/fp16 weight copies + activations saved for backward (measured with
  saved-tensor hooks, see trainkit.precision).
On a CPU it finishes in well under a minute. Timings are for reading, not for tests.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from trainkit.device import pick_device  # noqa: E402
from trainkit.models import TinyGPTConfig, TinyGPT  # noqa: E402
from trainkit.precision import cuda_peak_bytes, saved_tensor_bytes, time_per_call  # noqa: E402

CONFIGS = {  # (model config, batch size) per device type
    "cpu": (TinyGPTConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=128), 8),
    "cuda": (TinyGPTConfig(vocab_size=4096, block_size=512, n_layer=8, n_head=12, n_embd=768), 16),
}


def recipes(device: torch.device) -> dict[str, tuple[torch.dtype | None, bool, bool]]:
    """name -> (autocast dtype or None for fp32, use GradScaler, fp32 matmuls as TF32)."""
    out = {"fp32 (IEEE)": (None, False, False)}
    if device.type == "cuda" and torch.cuda.is_tf32_supported():
        out["fp32 (TF32)"] = (None, False, True)
    out["bf16 autocast"] = (torch.bfloat16, False, False)
    if device.type == "cuda":
        out["fp16 + GradScaler"] = (torch.float16, True, False)
    return out


def set_tf32(on: bool) -> None:
    """fp32 matmuls and convolutions on CUDA as TF32 or IEEE, through torch's current settings (trainkit.precision)."""
    torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"


def make_step(cfg: TinyGPTConfig, batch: int, device: torch.device, dtype: torch.dtype | None, use_scaler: bool):
    """A model, its optimizer and a closure running one full training step on a fixed batch."""
    torch.manual_seed(0)
    model = TinyGPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
    x = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)
    y = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size), device=device)

    def forward():
        with torch.amp.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            return model(x, y)[1]

    def step():
        loss = forward()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()

    return model, forward, step


def estimate_bytes(model: torch.nn.Module, forward) -> dict[str, int]:
    """Analytic model state (fp32 weights, grads, two AdamW moments) plus measured saved tensors."""
    n = sum(p.numel() for p in model.parameters())
    saved = saved_tensor_bytes(forward, exclude=list(model.parameters()))
    return {"state": 16 * n, "cast_copies": saved["cast_copies"], "activations": saved["activations"]}


def run(device: torch.device, steps: int) -> list[dict]:
    cfg, batch = CONFIGS[device.type]
    rows = []
    for name, (dtype, use_scaler, tf32) in recipes(device).items():
        if device.type == "cuda":
            set_tf32(tf32)
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
        model, forward, step = make_step(cfg, batch, device, dtype, use_scaler)
        seconds = time_per_call(step, n=steps, warmup=2, device=device)  # warm-up creates the AdamW state
        est = estimate_bytes(model, forward)
        row = {"recipe": name, "ms": seconds * 1e3, "tokens_per_s": batch * cfg.block_size / seconds,
               "estimate_mib": sum(est.values()) / 2**20, **{f"{k}_mib": v / 2**20 for k, v in est.items()}}
        if device.type == "cuda":
            held = torch.cuda.memory_allocated() - before
            row["peak_mib"] = (held + cuda_peak_bytes(step)) / 2**20
        rows.append(row)
        del model, forward, step
    if device.type == "cuda":
        set_tf32(False)
    base = rows[0]["ms"]
    for row in rows:
        row["speedup"] = base / row["ms"]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: CUDA if available")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per recipe (default: 5 on CPU, 20 on CUDA)")
    args = ap.parse_args(argv)
    device = torch.device(args.device) if args.device else pick_device()
    steps = args.steps or (20 if device.type == "cuda" else 5)
    cfg, batch = CONFIGS[device.type]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {name}: TinyGPT n_layer={cfg.n_layer} n_embd={cfg.n_embd} "
          f"block={cfg.block_size}, batch {batch}, AdamW, median of {steps} steps")
    rows = run(device, steps)
    head = (f"{'recipe':<18} {'ms/step':>9} {'tokens/s':>10} {'speed-up':>8} {'state':>8} {'casts':>7} "
            f"{'activ.':>8} {'estimate':>9}" + (f" {'peak':>9}" if device.type == "cuda" else "") + "   (MiB)")
    print(head)
    for r in rows:
        print(f"{r['recipe']:<18} {r['ms']:>9.1f} {r['tokens_per_s']:>10,.0f} {r['speedup']:>7.2f}x "
              f"{r['state_mib']:>8.1f} {r['cast_copies_mib']:>7.1f} {r['activations_mib']:>8.1f} {r['estimate_mib']:>9.1f}"
              + (f" {r['peak_mib']:>9.1f}" if "peak_mib" in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
