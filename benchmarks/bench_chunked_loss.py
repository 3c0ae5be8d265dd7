#!/usr/bin/env python
"""Benchmark (not a test): peak memory and time of one loss forward + backward, plain against chunked.

The plain path materialises the (tokens x V) logits (`lm_head`, then `label_smoothed_nll`), and autograd keeps them
and their gradient; `chunked_label_smoothed_nll` (recipe key `loss_chunk_tokens`) keeps at most one chunk's. Here:
random decoder outputs (tokens x d_model) and a (V x d_model) projection, both requiring gradients, 10% of the
positions padded; one forward and backward per repetition.

Memory: on CUDA `torch.cuda.max_memory_allocated` above what the inputs take; on the CPU each variant runs in a
fresh process and reports its peak resident memory (`ru_maxrss`) above its resident memory just before the first
step (torch's CPU allocator is invisible to tracemalloc). Time: median of --repeats steps after one warm-up.

Usage: python benchmarks/bench_chunked_loss.py [--device cpu] [--tokens 4096] [--vocab 37000] [--d_model 512]
                                               [--chunk 1024]
Writes benchmarks/results/chunked_loss.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vaswani_hf.training.objective import chunked_label_smoothed_nll, label_smoothed_nll

RESULTS = Path(__file__).resolve().parent / "results"


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(variant: str, args) -> dict:
    """One variant in this process: {peak_mib, step_ms}."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    hidden = torch.randn(args.tokens, args.d_model, device=device, requires_grad=True)
    weight = (torch.randn(args.vocab, args.d_model, device=device) * args.d_model**-0.5).requires_grad_()
    labels = torch.randint(0, args.vocab, (args.tokens,), device=device)
    labels[: args.tokens // 10] = -100

    def step():
        if variant == "plain":
            loss, _ = label_smoothed_nll(torch.nn.functional.linear(hidden, weight), labels, 0.1)
        else:
            loss, _ = chunked_label_smoothed_nll(hidden, weight, labels, 0.1, chunk=args.chunk)
        loss.backward()
        hidden.grad = weight.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = rss_mib()
    step()
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return {"variant": variant, "peak_mib": round(peak, 1), "step_ms": round(statistics.median(times), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=37000)
    ap.add_argument("--d_model", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variant", choices=["plain", "chunked"], help=argparse.SUPPRESS)  # one variant, this process
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args)))
        return
    rows = []
    for variant in ("plain", "chunked"):
        if args.device.startswith("cuda"):
            rows.append(measure(variant, args))
        else:  # a fresh process per variant: ru_maxrss is a process's lifetime peak
            command = [sys.executable, __file__, "--variant", variant, *sys.argv[1:]]
            rows.append(
                json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            )
        print(json.dumps(rows[-1]), flush=True)
    logits_mib = args.tokens * args.vocab * 4 / 2**20
    result = {
        "device": args.device,
        "tokens": args.tokens,
        "vocab": args.vocab,
        "d_model": args.d_model,
        "chunk": args.chunk,
        "fp32_logits_mib": round(logits_mib, 1),
        "torch": torch.__version__,
        "processor": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chunked_loss.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# Chunked label-smoothed loss: {args.tokens} tokens x {args.vocab} classes, d_model {args.d_model}, "
        f"chunk {args.chunk}",
        "",
        f"Device {args.device} ({result['processor']}, {result['threads']} threads, load average "
        f"{result['load_average'][0]:.1f}), torch {torch.__version__}; one fp32 logits tensor is "
        f"{logits_mib:.0f} MiB. Written by `benchmarks/bench_chunked_loss.py`.",
        "",
        "| loss | peak memory above inputs (MiB) | forward + backward (ms, median) |",
        "|---|---|---|",
    ]
    lines += [f"| {r['variant']} | {r['peak_mib']:.0f} | {r['step_ms']:.0f} |" for r in rows]
    (args.out / "chunked_loss.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
