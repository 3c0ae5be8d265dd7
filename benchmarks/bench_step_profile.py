#!/usr/bin/env python
"""Benchmark (not a test): where the training step of the peer benchmark's model spends its time, ours against
`MarianMTModel` with identical weights, operator by operator, with the processor's widest kernels and with the
kernels capped at AVX2 (issue 40: the ratio between the systems depends on the processor: which kernels?).

    python benchmarks/bench_step_profile.py                    # native and AVX2-capped; results/step_profile.*
    python benchmarks/bench_step_profile.py --isa native --steps 3 --results_dir /tmp/p   # a quick look

The model is the multi30k-en-de recipe's (d_model 256, d_ff 512, 4 heads, 3+3 layers, dropout 0.3, shared 8,000
subwords), the batch ~1,024 target tokens (64 x 16), as `bench_peers.py` trains it; each side as its trainer runs
it: ours with the paper's loss (`LabelSmoothedLoss`, 0.1) and fused Adam, Marian with transformers' `LabelSmoother`
(0.1) and fused AdamW (weight decay 0, Seq2SeqTrainer's default), both in train mode with their configs' defaults
(`use_cache` as the trainers leave it).

"AVX2-capped" runs the same process with `MKL_ENABLE_INSTRUCTIONS=AVX2` (the fp32 matrix products of this step
are MKL's SGEMM: with MKL_VERBOSE=1 torch 2.13's CPU build logs SGEMM calls and no oneDNN primitive, and its banner
changes from "AVX-512" to "AVX2 enabled processors" under the cap), `ATEN_CPU_CAPABILITY=avx2` (torch's own
vectorised kernels: softmax, layer norm, element-wise, Adam) and `ONEDNN_MAX_CPU_ISA=AVX2` (for any oneDNN call): the
code paths an AVX2-only processor takes, on this processor's cores, caches and clocks. It is an emulation: an AMD EPYC
also differs in caches, memory and clocks; it shows which operators owe their speed to AVX-512.
Each configuration runs in a fresh process (warm-up, timed steps, then profiled steps per variant).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
CAPPED = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
VARIANTS = ("ours", "marian")


def build(variant: str, vocab: int):
    """The recipe-sized model (seed 0), ours or its MarianMTModel copy with identical weights, in train mode."""
    import torch

    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.export.marian import to_marian

    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=vocab,
        d_model=256,
        d_ff=512,
        num_heads=4,
        num_encoder_layers=3,
        num_decoder_layers=3,
        dropout=0.3,
        sinusoid_layout="concatenated",
    )
    model = VaswaniForConditionalGeneration(config)
    if variant == "marian":
        model = to_marian(model)  # dropout and attention dropout carried over
    return model.train()


def step_function(variant: str, model):
    """One update as each trainer makes it (loss, backward, fused optimizer step, zero_grad)."""
    import torch

    from vaswani_hf.modeling_vaswani import shift_tokens_right
    from vaswani_hf.training.objective import LabelSmoothedLoss

    if variant == "ours":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
        loss_fn = LabelSmoothedLoss(0.1)
    else:
        from transformers.trainer_pt_utils import LabelSmoother

        optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, fused=True
        )
        smoother = LabelSmoother(epsilon=0.1)

        def loss_fn(outputs, labels):
            return smoother(outputs, labels)

    def step(batch):
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        outputs = model(**inputs, decoder_input_ids=shift_tokens_right(batch["labels"], 0, 0))
        loss = loss_fn(outputs, batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def child(args) -> dict:
    """One configuration in this process: per variant, timed steps and one profiled step's operators."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_training_step import make_batch

    torch.set_num_threads(args.threads)
    batch = make_batch(args.batch, args.length, args.vocab)
    tokens = int((batch["labels"] != -100).sum())
    found = {"capability": torch.backends.cpu.get_cpu_capability(), "variants": {}}
    for variant in VARIANTS:
        step = step_function(variant, build(variant, args.vocab))
        for _ in range(args.warmup):
            step(batch)
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            step(batch)
            times.append(time.perf_counter() - start)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(args.profiled):
                step(batch)
        ops = {
            e.key: round(e.self_cpu_time_total / 1000 / args.profiled, 3)
            for e in prof.key_averages()
            if e.self_cpu_time_total > 0
        }
        found["variants"][variant] = {
            "step_ms": round(1000 * statistics.median(times), 2),
            "target_tokens": tokens,
            "tokens_per_s": round(tokens / statistics.median(times), 1),
            "ops_ms": ops,
        }
    return found


def run_configuration(isa: str, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CAPPED}  # native: no cap inherited from the caller
    env.update(CAPPED if isa == "avx2" else {})
    argv = [
        sys.executable,
        __file__,
        "--child",
        "--threads",
        str(args.threads),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--profiled",
        str(args.profiled),
        "--batch",
        str(args.batch),
        "--length",
        str(args.length),
        "--vocab",
        str(args.vocab),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {isa} configuration failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cpu() -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
    from peer_monitor import processor

    found = processor()
    return {
        "model": found["cpu_model"],
        "avx512f": found["avx512f"],
        "avx2": found["avx2"],
        "amx": found["amx"],
        "vector_isa": found["vector_isa"],
        "cpus": os.cpu_count(),
    }


def markdown(result: dict) -> str:
    configs = result["configurations"]
    columns = [(isa, v) for isa in configs for v in VARIANTS]
    totals = {c: sum(configs[c[0]]["variants"][c[1]]["ops_ms"].values()) for c in columns}
    names = set()
    for isa, variant in columns:
        ops = configs[isa]["variants"][variant]["ops_ms"]
        names.update(sorted(ops, key=ops.get, reverse=True)[: result["top"]])
    order = sorted(names, key=lambda n: -max(configs[i]["variants"][v]["ops_ms"].get(n, 0) for i, v in columns))
    head = " | ".join(f"{v}, {configs[i]['capability']}" for i, v in columns)
    rows = [f"| operator (ms per step, self CPU time) | {head} |", "|---|" + "---:|" * len(columns)]
    for name in order:
        cells = " | ".join(f"{configs[i]['variants'][v]['ops_ms'].get(name, 0):.1f}" for i, v in columns)
        rows.append(f"| `{name}` | {cells} |")
    rows.append("| all operators | " + " | ".join(f"{totals[c]:.1f}" for c in columns) + " |")
    speed = ["| kernels | ours: ms per step | Marian: ms per step | ours / Marian speed |", "|---|---:|---:|---:|"]
    for isa, config in configs.items():
        ours, marian = config["variants"]["ours"], config["variants"]["marian"]
        speed.append(
            f"| {config['capability']} ({isa}) | {ours['step_ms']:.1f} | {marian['step_ms']:.1f} | "
            f"**{marian['step_ms'] / ours['step_ms']:.2f}x** |"
        )
    info = result["cpu"]
    return (
        "\n\n".join(
            [
                "# The training step, operator by operator: ours and MarianMTModel, native and AVX2-capped kernels",
                f"`python benchmarks/bench_step_profile.py {result['command']}` ({result['date']}), {info['model']} "
                f"({info['vector_isa']}{', AMX' if info['amx'] else ''}), "
                f"{result['threads']} threads, "
                f"torch {result['torch']}; load average before {result['load_before']}, after {result['load_after']}. "
                f"Model and batch as the peer benchmark trains them ({result['batch']} x {result['length']} tokens, "
                f"{result['target_tokens']} real target tokens, vocabulary {result['vocab']}); median of {result['steps']} "
                f"timed steps after {result['warmup']} warm-up steps, then {result['profiled']} profiled steps per variant. "
                "AVX2-capped: ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2 (an "
                "emulation of an AVX2-only processor's code paths on this one; see the script's docstring).",
                "\n".join(speed),
                "## Operators (the union of each configuration's top operators)",
                "\n".join(rows),
                (
                    "The profiler's self CPU time of an operator includes its intra-op threads' work as wall time on the calling "
                    "thread; the profiled steps run slower than the timed ones (the profiler's own cost), so compare columns, "
                    "not the totals with the timed step."
                ),
            ]
        )
        + "\n"
    )


def parse_args(argv):
    from vaswani_hf import io
    from vaswani_hf.cli import contract
    from vaswani_hf.settings import positive_int

    parser = contract.ArgumentParser(description=__doc__)
    parser.add_argument("--isa", choices=("both", "native", "avx2"), default="both")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--steps", type=positive_int, default=20, help="timed steps per variant")
    parser.add_argument("--warmup", type=positive_int, default=5)
    parser.add_argument("--profiled", type=positive_int, default=5, help="profiled steps per variant")
    parser.add_argument("--batch", type=positive_int, default=64)
    parser.add_argument("--length", type=positive_int, default=16)
    parser.add_argument("--vocab", type=positive_int, default=8000)
    parser.add_argument("--top", type=positive_int, default=12, help="operators per configuration in the table")
    parser.add_argument("--results_dir", default=str(RESULTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    results = Path(args.results_dir)
    if results.exists() and not results.is_dir():
        raise io.UsageError(f"--results_dir {results}: exists and is not a folder; name a folder")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    import torch

    load_before = [round(x, 2) for x in os.getloadavg()]
    isas = ("native", "avx2") if args.isa == "both" else (args.isa,)
    configurations = {}
    for isa in isas:
        configurations[isa] = run_configuration(isa, args)
        speeds = {v: configurations[isa]["variants"][v]["step_ms"] for v in VARIANTS}
        print(f"{isa} ({configurations[isa]['capability']}): step ms {speeds}", flush=True)
    first = configurations[isas[0]]["variants"]["ours"]
    result = {
        "command": " ".join(argv) or "(defaults)",
        "date": datetime.date.today().isoformat(),
        "cpu": cpu(),
        "torch": torch.__version__,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "profiled": args.profiled,
        "batch": args.batch,
        "length": args.length,
        "vocab": args.vocab,
        "target_tokens": first["target_tokens"],
        "top": args.top,
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "configurations": configurations,
    }
    out = Path(args.results_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_profile.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    (out / "step_profile.md").write_text(markdown(result), encoding="utf-8")
    print(f"wrote {out / 'step_profile.md'}", flush=True)
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv:
        sys.exit(main(sys.argv[1:]))
    from vaswani_hf.cli import contract

    sys.exit(contract.run_cli(main))
