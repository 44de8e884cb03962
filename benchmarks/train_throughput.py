"""Tokens/s of the capstone's reference loop (trainkit.train), against a minimal standard GPT training step.

    python benchmarks/train_throughput.py                  # the device at hand; CPU: about 3-5 minutes on 2 cores
    python benchmarks/train_throughput.py --steps 20 --no-compile --no-ddp
    python benchmarks/train_throughput.py --json out.json  # also write the rows as JSON

Rows (each: median tokens/s over timed chunks of 3 steps after untimed warm-up steps; the rows of a group are timed
round-robin, chunk by chunk, so that they share the conditions of a shared machine; also tokens per CPU-second):
- "baseline": a plain GPT-2-style model (trainkit.models.TinyGPT: LayerNorm with bias, GELU MLP 4x, fused qkv,
  tied head) and the textbook step: random windows (torch.randint), forward, backward, clip_grad_norm_(1.0),
  AdamW step, zero_grad. On the CPU at n_layer 4, n_head 4, n_embd 128, block 128, batch 32, vocab 256: the
  configuration at which nanoGPT's own model and step ran at about 32.6k tok/s fp32 (30.1k bf16) on the course's
  2-core machine.
- "bare step": the same textbook step on the capstone's model (GPTConfig.tiny()): the model's own cost.
- "capstone": ``Trainer.train_step`` of the reference loop at GPTConfig.tiny() (same depth, width, heads, block,
  batch and vocabulary; 2 of the 4 query-head pairs share key/value heads, SwiGLU MLP of 384), which also sets
  the LR, checks the gradient for non-finite values and gathers per-step statistics.
- fp32 vs bf16 autocast, eager vs torch.compile, and (CPU) 1 process with 2 threads vs 2 DDP processes (gloo)
  with 1 thread each.
- On CUDA also the gpu preset (TrainConfig.gpu(): 4.85M parameters, 32 x 256 bytes a step, dropout 0.1 in the bare
  and capstone rows; the baseline has no dropout) and the seed recipe (51.4M parameters, 32 x 1024 tokens a step),
  each at the baseline's matching depth, width, heads, block, batch and vocabulary, with the capstone rows'
  model-FLOPs utilisation: FLOPs per token = 6 * N + 12 * n_layer * d_model * T (N: the parameters that take part
  in matmuls, i.e. all but the embedding tables, plus the output head's matrix; the second term is attention's
  score and value matmuls, forward and backward, not halved for the causal mask), over the chip's dense bf16 peak
  (bf16 rows) or fp32-matmul peak (fp32 rows: TF32, which this script turns on for every row as the trainer does,
  on chips that have it). A chip missing from PEAKS, or a V100 / T4 bf16 row, gets no MFU ("unknown peak").
Timings are for reading, not for tests; say what else ran on the machine when you quote them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import torch  # noqa: E402

from trainkit.corpus import TokenData  # noqa: E402
from trainkit.device import pick_device  # noqa: E402
from trainkit.capstone.gpt import GPTConfig  # noqa: E402
from trainkit.precision import fp32_matmul_precision, use_tf32  # noqa: E402
from trainkit.train import TrainConfig  # noqa: E402

# the presets a row can be sized from (CPU: tiny only)
SIZES = {"tiny": TrainConfig.tiny, "gpu": TrainConfig.gpu, "recipe": TrainConfig.seed_recipe}

# Dense peak FLOP/s of the chips we may meet: (pattern for torch.cuda.get_device_name(), bf16 tensor cores, fp32
# matmuls), the first matching pattern wins, and a name no pattern matches gets None: "unknown peak", never another
# chip's figure (an H100 PCIe is not an SXM). fp32 matmuls: TF32 tensor cores where the chip has them (Ampere and
# later), else plain FP32 (V100, T4). bf16 None: not native (V100 and T4 emulate it). NVIDIA's datasheets quote
# tensor-core figures "with sparsity" (2:4 structured); the dense figures here are half of those.
PEAKS = [
    # NVIDIA H100 datasheet: SXM BF16 1,979 / TF32 989 TFLOPS, PCIe 1,513 / 756, NVL 1,671 / 835 (with sparsity).
    # Names: "NVIDIA H100 80GB HBM3" (SXM5), "NVIDIA H100 PCIe", "NVIDIA H100 NVL"; a bare "H100" stays unknown.
    (r"\bH100\b.*\bPCIe\b", 756.5e12, 378e12),
    (r"\bH100\b.*\bNVL\b", 835.5e12, 417.5e12),
    (r"\bH100\b.*\b(SXM\d?|HBM3)\b", 989.5e12, 494.5e12),
    # NVIDIA H200 datasheet: H200 SXM BF16 1,979 / TF32 989 TFLOPS, H200 NVL 1,671 / 835 (with sparsity)
    (r"\bH200 NVL\b", 835.5e12, 417.5e12),
    (r"\bH200\b", 989.5e12, 494.5e12),
    # NVIDIA A100 datasheet (40GB PCIe, 80GB PCIe, SXM alike): BF16 312 | 624 TFLOPS*, TF32 156 | 312*
    (r"\bA100\b", 312e12, 156e12),
    # NVIDIA A10 datasheet: BF16 125 | 250 TFLOPS*, TF32 62.5 | 125* (not the A10G, which has no NVIDIA datasheet)
    (r"\bA10\b", 125e12, 62.5e12),
    # NVIDIA L40S datasheet: BF16 362.05 | 733 TFLOPS*, TF32 183 | 366*; L40: BF16 181.05 | 362.1*, TF32 90.5 | 181*
    (r"\bL40S\b", 362e12, 183e12),
    (r"\bL40\b", 181e12, 90.5e12),
    # NVIDIA L4 datasheet: BF16 242 TFLOPS*, TF32 120* (with sparsity only)
    (r"\bL4\b", 121e12, 60e12),
    # NVIDIA V100 datasheet: FP32 15.7 TFLOPS (SXM2), 14 (PCIe), V100S 16.4; no TF32, no native bf16
    (r"\bV100S\b", None, 16.4e12),
    (r"\bV100-SXM2\b", None, 15.7e12),
    (r"\bV100-PCIE\b", None, 14e12),
    # NVIDIA T4 datasheet: FP32 8.1 TFLOPS; no TF32, no native bf16 (its 65 TFLOPS are fp16)
    (r"\bT4\b", None, 8.1e12),
]


def measure(rows: list[dict], steps: int, warmup: int, device, chunk: int = 3) -> None:
    """Time every row's step function, round-robin in chunks of ``chunk`` steps, so that rows share the same
    machine conditions (the course machine is shared); store the median tokens/s over chunks (wall clock) and the
    tokens per CPU-second of this process. On CUDA the device is synchronised once before and once after each timed
    chunk, never inside it: the baseline and bare steps themselves never wait for the GPU (their batches are drawn
    on the device), so a chunk measures the queued work; the capstone's ``Trainer.train_step`` synchronises at the end
    of each of its steps to time itself, which is the trainer's own cost."""
    live = [r for r in rows if "step" in r]
    for r in live:
        for i in range(warmup):
            r["step"](i)
        r.update(_rates=[], _cpu=0.0, _done=0, _i=warmup)
    while any(r["_done"] < steps for r in live):
        for r in live:
            if r["_done"] >= steps:
                continue
            n = min(chunk, steps - r["_done"])
            if device.type == "cuda":
                torch.cuda.synchronize()
            c0, t0 = time.process_time(), time.perf_counter()
            for j in range(n):
                r["step"](r["_i"] + j)
            if device.type == "cuda":
                torch.cuda.synchronize()
            r["_rates"].append(n * r["tokens"] / (time.perf_counter() - t0))
            r["_cpu"] += time.process_time() - c0
            r["_done"] += n
            r["_i"] += n
    for r in live:
        r["tok_s"] = statistics.median(r["_rates"])
        r["tok_per_cpu_s"] = steps * r["tokens"] / r["_cpu"]
        for k in ("_rates", "_cpu", "_done", "_i", "step"):
            del r[k]


# ------------------------------------------------------------------------------------------- the baseline
def baseline(precision: str, compile_: bool, device, size: str = "tiny", steps: int = 0,
             model_kind: str = "gpt2") -> dict:
    """A minimal standard GPT training step (see the module doc); returns a row with its step function."""
    from trainkit.capstone.gpt import GPT
    from trainkit.models import TinyGPT, TinyGPTConfig as BaseConfig

    torch.manual_seed(0)
    preset = SIZES[size]()
    m, B = preset.model, preset.batch_size
    if model_kind == "capstone":   # the capstone's model in the textbook step: isolates the loop's own cost
        cfg, model = m, GPT(m).to(device)
    else:                          # GPT-2 style at the preset's depth, width, heads, block and vocabulary
        cfg = BaseConfig(vocab_size=m.vocab_size, block_size=m.block_size, n_layer=m.n_layer, n_head=m.n_heads_q,
                         n_embd=m.d_model, bias=True, tie_weights=True)
        model = TinyGPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if device.type == "cuda" else {}))
    fwd = torch.compile(model) if compile_ else model
    data = TokenData.default().train.to(device)
    T = cfg.block_size
    offsets = torch.arange(T + 1, device=device)

    def step(i):
        # One gather on the device. (Slicing ``data[j:j + T]`` with each start ``j`` of a CUDA tensor turns ``j`` into
        # a Python int: a host-device sync for each bound of each window, at least B a step, which a GPU row would
        # time as the step's own cost.)
        ix = torch.randint(len(data) - T - 1, (B,), device=device)
        chunk = data[ix[:, None] + offsets]                      # (B, T + 1)
        x, y = chunk[:, :-1], chunk[:, 1:]
        if precision == "bf16":
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits, _ = fwd(x)
        else:
            logits, _ = fwd(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {"step": step, "tokens": B * T, "params": sum(p.numel() for p in model.parameters())}


def bare(precision: str, compile_: bool, device, size: str = "tiny", steps: int = 0) -> dict:
    return baseline(precision, compile_, device, size=size, steps=steps, model_kind="capstone")


# ------------------------------------------------------------------------------------------- the reference loop
def capstone(precision: str, compile_: bool, device, size: str = "tiny", steps: int = 1000) -> dict:
    """``Trainer.train_step`` of the reference loop; returns a row with its step function."""
    from trainkit.train import Trainer

    tmp = tempfile.mkdtemp(prefix="capstone-bench-")
    cfg = SIZES[size](steps=max(steps, 10), warmup=1, precision=precision, compile=compile_, logger="none",
                      progress=False, out_dir=tmp, device=device.type)
    trainer = Trainer(cfg)
    if compile_ and not trainer.compile_status["active"]:
        return {"error": f"compile fell back: {trainer.compile_status['reason']}"}
    return {"step": trainer.train_step, "params": trainer.counts["total"],
            "tokens": cfg.batch_size * cfg.model.block_size * cfg.grad_accum * trainer.world_size,
            "flops_per_token": flops_per_token(cfg.model, trainer.counts)}


def flops_per_token(m: GPTConfig, counts: dict) -> float:
    matmul_params = counts["non_embedding"] + m.vocab_size * m.d_model   # + the output head's matmul
    return 6 * matmul_params + 12 * m.n_layer * m.d_model * m.block_size


def peak_flops(precision: str, name: str | None = None) -> float | None:
    """The dense peak FLOP/s of the chip ``name`` (default: this process's CUDA device) for ``precision`` ("bf16"
    or "fp32"), or None where PEAKS does not know the chip or the chip has no native bf16."""
    if name is None:
        if not torch.cuda.is_available():
            return None
        name = torch.cuda.get_device_name()
    for pattern, bf16, fp32 in PEAKS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return bf16 if precision == "bf16" else fp32
    return None


# ------------------------------------------------------------------------------------------- 2 processes
def ddp_worker(args) -> None:
    """Run under torch.distributed.run: each rank 1 thread; rank 0 prints one JSON line."""
    torch.set_num_threads(1)
    device = pick_device()
    row = capstone(args.precision, False, device, steps=args.steps + args.warmup + 1)
    measure([row], args.steps, args.warmup, device)
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT " + json.dumps(row), flush=True)


def two_processes(kind: str, precision: str, steps: int, warmup: int) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", "29533", __file__, "--worker", kind, "--precision", precision, "--steps", str(steps),
           "--warmup", str(warmup)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TRAINKIT_FORCE_CPU="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}


# ------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiled rows: compilation)")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--compile-only", action="store_true", help="only the torch.compile rows")
    p.add_argument("--json", default=None)
    p.add_argument("--threads", type=int, default=0, help="torch threads in the 1-process rows (0: torch's default)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return ddp_worker(args)

    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device()
    if device.type == "cuda":   # as the trainer does: every row's fp32 matmuls are TF32 (Ampere and later)
        use_tf32()              # torch's current TF32 settings (the legacy ones warn on PyTorch 2.9-2.11)
    sizes = ["tiny"] + (["gpu", "recipe"] if device.type == "cuda" else [])
    compiles = [True] if args.compile_only else [False] + ([] if args.no_compile else [True])
    where = (torch.cuda.get_device_name() if device.type == "cuda"
             else f"CPU, {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    print(f"torch {torch.__version__} | {where} | load average before: {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for size in sizes:
        for compile_ in compiles:   # one interleaved group per (size, compile): its rows share the conditions
            group = []
            for name, fn in (("baseline", baseline), ("bare step", bare), ("capstone", capstone)):
                for precision in ("fp32", "bf16"):
                    t0 = time.perf_counter()
                    try:
                        res = fn(precision, compile_, device, size=size, steps=args.steps + args.warmup + 1)
                    except Exception as e:  # noqa: BLE001 -- a row that cannot run says why
                        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                    group.append(dict(loop=name, size=size, precision=precision, compile=compile_,
                                      procs=1, threads=torch.get_num_threads(), **res, build_s=time.perf_counter() - t0))
            try:
                measure(group, args.steps, args.warmup, device)
            except Exception as e:  # noqa: BLE001 -- e.g. a compiled row failing at its first step
                for r in group:
                    r.pop("step", None)
                    r.setdefault("error", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            for row in group:
                peak = peak_flops(row["precision"])
                if peak and "flops_per_token" in row and "tok_s" in row:
                    row["mfu"] = row["tok_s"] * row["flops_per_token"] / peak
                print(fmt(row), flush=True)
            rows += group
    if device.type == "cpu" and not args.no_ddp:
        t0 = time.perf_counter()
        res = two_processes("capstone", "fp32", args.steps, args.warmup)
        row = dict(loop="capstone", size="tiny", precision="fp32", compile=False, procs=2, threads=1, **res,
                   build_s=time.perf_counter() - t0)
        rows.append(row)
        print(fmt(row), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| loop | model | precision | compile | processes x threads | tokens/s | tokens per CPU-s | MFU |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        tok = f"{r['tok_s'] / 1e3:.1f}k" if "tok_s" in r else r.get("error", "?")
        cpu = f"{r['tok_per_cpu_s'] / 1e3:.1f}k" if "tok_per_cpu_s" in r else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        print(f"| {r['loop']} | {r['size']} | {shown_precision(r['precision'], device)} | {'yes' if r['compile'] else 'no'} | "
              f"{r['procs']} x {r['threads']} | {tok} | {cpu} | {mfu} |")
    print_ratios(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


def print_ratios(rows: list[dict]) -> None:
    """The two ratios the rows are for, per group: what the loop costs (Trainer.train_step against the textbook step
    on the same model and batches) and what the model costs (that step against the GPT-2-style baseline)."""
    one = {(r["loop"], r["size"], r["precision"], r["compile"]): r["tok_s"] for r in rows
           if r.get("procs") == 1 and "tok_s" in r}
    print("\nratios (tokens/s): loop = capstone / bare step (the Trainer's own cost), "
          "model = bare step / baseline (the architecture's)")
    for (loop, size, precision, compile_), tok_s in one.items():
        bare_ = one.get(("bare step", size, precision, compile_))
        base = one.get(("baseline", size, precision, compile_))
        if loop == "capstone" and bare_ and base:
            print(f"  {size} {precision} compile={compile_!s:5s}: loop {tok_s / bare_:.3f}x, model {bare_ / base:.3f}x, "
                  f"capstone / baseline {tok_s / base:.3f}x")


def shown_precision(precision: str, device) -> str:
    """A row's precision as the table shows it: which fp32 ran (TF32 matmuls on CUDA, as set above; IEEE on a CPU)."""
    if precision != "fp32":
        return precision
    return "fp32 (TF32 matmuls)" if device.type == "cuda" and fp32_matmul_precision(device) == "tf32" else "fp32 (IEEE)"


def fmt(r: dict) -> str:
    if "error" in r:
        return f"{r['loop']:9s} {r['size']:6s} {r['precision']} compile={r['compile']!s:5s} procs={r['procs']}: {r['error']}"
    mfu = f"  MFU {100 * r['mfu']:.1f}%" if "mfu" in r else ""
    return (f"{r['loop']:9s} {r['size']:6s} {r['precision']} compile={r['compile']!s:5s} procs={r['procs']}: "
            f"{r['tok_s'] / 1e3:8.1f}k tok/s, {r['tok_per_cpu_s'] / 1e3:.1f}k tok per CPU-s{mfu}")


if __name__ == "__main__":
    main()
