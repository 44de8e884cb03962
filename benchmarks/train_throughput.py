"""Tokens/s of the capstone's reference loop (trainkit.train), against a minimal standard GPT training step.

    python benchmarks/train_throughput.py                  # the device at hand; CPU: about 3-5 minutes on 2 cores
    python benchmarks/train_throughput.py --steps 20 --no-compile --no-ddp
    python benchmarks/train_throughput.py --json out.json  # also write the rows as JSON

Rows (each: median tokens/s over timed chunks, after warm-up steps that are not timed):
- "baseline": a plain GPT-2-style model (trainkit.models.TinyGPT: LayerNorm with bias, GELU MLP 4x, fused qkv,
  tied head) and the textbook step: random windows (torch.randint), forward, backward, clip_grad_norm_(1.0),
  AdamW step, zero_grad. On the CPU at n_layer 4, n_head 4, n_embd 128, block 128, batch 32, vocab 256 (the
  configuration of the nanoGPT measurement quoted in the course's issue tracker: 32.6k tok/s fp32, 30.1k bf16).
- "capstone": ``Trainer.train_step`` of the reference loop at GPTConfig.tiny() (same depth, width, heads, block,
  batch and vocabulary; 2 of the 4 query-head pairs share key/value heads, SwiGLU MLP of 384), which also sets
  the LR, checks the gradient for non-finite values and gathers per-step statistics.
- fp32 vs bf16 autocast, eager vs torch.compile, and (CPU) 1 process with 2 threads vs 2 DDP processes (gloo)
  with 1 thread each.
- On CUDA also the seed recipe (51.4M parameters, 32 x 1024 tokens a step) and its model-FLOPs utilisation:
  FLOPs per token = 6 * N + 12 * n_layer * d_model * T (N: the parameters that take part in matmuls, i.e. all but
  the embedding tables, plus the output head's matrix; the second term is attention's score and value matmuls,
  forward and backward, not halved for the causal mask), over the chip's dense bf16 (or TF32) peak.
Timings are for reading, not for tests; say what else ran on the machine when you quote them.
"""
from __future__ import annotations

import argparse
import json
import os
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
from trainkit.gpt import GPTConfig  # noqa: E402

# dense peak FLOP/s (bf16, tf32) of chips we may meet, from the vendors' data sheets (no sparsity)
PEAKS = {"H200": (989e12, 494e12), "H100": (989e12, 494e12), "A100": (312e12, 156e12), "L4": (121e12, 60e12),
         "A10": (125e12, 62.5e12), "L40S": (362e12, 183e12), "V100": (125e12, 15.7e12), "T4": (65e12, 8.1e12)}


def chunks_tok_s(step, tokens_per_step: int, steps: int, warmup: int, device, chunk: int = 5) -> dict:
    for i in range(warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    rates, cpu0, wall0 = [], time.process_time(), time.perf_counter()
    i = warmup
    while i < warmup + steps:
        n = min(chunk, warmup + steps - i)
        t0 = time.perf_counter()
        for j in range(n):
            step(i + j)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(n * tokens_per_step / (time.perf_counter() - t0))
        i += n
    wall = time.perf_counter() - wall0
    return {"tok_s": statistics.median(rates), "tok_s_mean": steps * tokens_per_step / wall,
            "cpu_s_per_step": (time.process_time() - cpu0) / steps}


# ------------------------------------------------------------------------------------------- the baseline
def baseline(precision: str, compile_: bool, steps: int, warmup: int, device, size: str = "tiny") -> dict:
    from trainkit.models import GPTConfig as BaseConfig, TinyGPT

    if size == "tiny":
        cfg, B = BaseConfig(vocab_size=256, block_size=128, n_layer=4, n_head=4, n_embd=128, bias=True,
                            tie_weights=True), 32
    else:
        cfg, B = BaseConfig(vocab_size=50257, block_size=1024, n_layer=8, n_head=8, n_embd=512, bias=True,
                            tie_weights=True), 32
    torch.manual_seed(0)
    model = TinyGPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if device.type == "cuda" else {}))
    fwd = torch.compile(model) if compile_ else model
    data = TokenData.default().train.to(device)
    T = cfg.block_size
    ctx = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if precision == "bf16" else None

    def step(i):
        ix = torch.randint(len(data) - T - 1, (B,), device=device)
        x = torch.stack([data[j:j + T] for j in ix])
        y = torch.stack([data[j + 1:j + 1 + T] for j in ix])
        if ctx is None:
            out = fwd(x)
        else:
            with ctx():
                out = fwd(x)
        logits = out[0] if isinstance(out, tuple) else out
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    n_params = sum(p.numel() for p in model.parameters())
    return {**chunks_tok_s(step, B * T, steps, warmup, device), "params": n_params}


# ------------------------------------------------------------------------------------------- the reference loop
def capstone(precision: str, compile_: bool, steps: int, warmup: int, device, size: str = "tiny") -> dict:
    from trainkit.train import Trainer, TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        preset = TrainConfig.tiny if size == "tiny" else TrainConfig.seed_recipe
        cfg = preset(steps=max(steps + warmup + 1, 10), warmup=1, precision=precision, compile=compile_,
                     logger="none", progress=False, out_dir=tmp, device=device.type)
        trainer = Trainer(cfg)
        if compile_ and not trainer.compile_status["active"]:
            return {"error": f"compile fell back: {trainer.compile_status['reason']}"}
        tokens = cfg.batch_size * cfg.model.block_size * cfg.grad_accum * trainer.world_size
        out = chunks_tok_s(trainer.train_step, tokens, steps, warmup, device)
        out["params"] = trainer.counts["total"]
        out["flops_per_token"] = flops_per_token(cfg.model, trainer.counts)
        trainer.close()
        return out


def flops_per_token(m: GPTConfig, counts: dict) -> float:
    matmul_params = counts["non_embedding"] + m.vocab_size * m.d_model   # + the output head's matmul
    return 6 * matmul_params + 12 * m.n_layer * m.d_model * m.block_size


def peak_flops(precision: str) -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    for key, (bf16, tf32) in PEAKS.items():
        if key in name:
            return bf16 if precision == "bf16" else tf32
    return None


# ------------------------------------------------------------------------------------------- 2 processes
def ddp_worker(args) -> None:
    """Run under torch.distributed.run: each rank 1 thread; rank 0 prints one JSON line."""
    torch.set_num_threads(1)
    device = pick_device()
    fn = capstone if args.worker == "capstone" else None
    res = fn(args.precision, False, args.steps, args.warmup, device)
    if int(os.environ.get("RANK", "0")) == 0:
        print("RESULT " + json.dumps(res), flush=True)


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
    p.add_argument("--json", default=None)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return ddp_worker(args)

    device = pick_device()
    rows = []
    sizes = ["tiny"] + (["recipe"] if device.type == "cuda" else [])
    compiles = [False] + ([] if args.no_compile else [True])
    where = (torch.cuda.get_device_name() if device.type == "cuda"
             else f"CPU, {torch.get_num_threads()} threads, {os.cpu_count()} cores")
    print(f"torch {torch.__version__} | {where} | load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for size in sizes:
        steps = args.steps if size == "tiny" or device.type == "cuda" else max(3, args.steps // 10)
        for name, fn in (("baseline", baseline), ("capstone", capstone)):
            for compile_ in compiles:
                for precision in ("fp32", "bf16"):
                    t0 = time.perf_counter()
                    try:
                        res = fn(precision, compile_, steps, args.warmup, device, size=size)
                    except Exception as e:  # noqa: BLE001 -- a row that cannot run says why
                        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                    row = dict(loop=name, size=size, precision=precision, compile=compile_, procs=1, **res,
                               seconds=time.perf_counter() - t0)
                    peak = peak_flops(precision)
                    if peak and "flops_per_token" in res:
                        row["mfu"] = res["tok_s"] * res["flops_per_token"] / peak
                    rows.append(row)
                    print(fmt(row), flush=True)
    if device.type == "cpu" and not args.no_ddp:
        for precision in ("fp32",):
            t0 = time.perf_counter()
            res = two_processes("capstone", precision, args.steps, args.warmup)
            row = dict(loop="capstone", size="tiny", precision=precision, compile=False, procs=2, **res,
                       seconds=time.perf_counter() - t0)
            rows.append(row)
            print(fmt(row), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| loop | model | precision | compile | processes | tokens/s | MFU |\n|---|---|---|---|---|---|---|")
    for r in rows:
        tok = f"{r['tok_s'] / 1e3:.1f}k" if "tok_s" in r else r.get("error", "?")
        mfu = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        print(f"| {r['loop']} | {r['size']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | {r['procs']} | "
              f"{tok} | {mfu} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


def fmt(r: dict) -> str:
    if "error" in r:
        return f"{r['loop']:9s} {r['size']:6s} {r['precision']} compile={r['compile']!s:5s} procs={r['procs']}: {r['error']}"
    mfu = f"  MFU {100 * r['mfu']:.1f}%" if "mfu" in r else ""
    return (f"{r['loop']:9s} {r['size']:6s} {r['precision']} compile={r['compile']!s:5s} procs={r['procs']}: "
            f"{r['tok_s'] / 1e3:8.1f}k tok/s (mean {r['tok_s_mean'] / 1e3:.1f}k, "
            f"{r['cpu_s_per_step'] * 1e3:.0f} ms CPU/step){mfu}  [{r['seconds']:.0f} s]")


if __name__ == "__main__":
    main()
