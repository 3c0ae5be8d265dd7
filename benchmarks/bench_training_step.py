"""Training-step throughput and peak memory: our model vs `MarianMTModel` with identical weights (issue 2).

One run, CPU, the paper's base configuration (37k shared vocabulary) unless told otherwise:
- forward + backward + Adam step, target tokens per second, ours and Marian's, interleaved A B A B ... so that
  machine drift affects both; the ratio is taken pair by pair and its median reported;
- peak resident memory of each variant in its own fresh process (`resource.getrusage`);
- the same for our model with gradient checkpointing (memory saved vs time cost);
- a profile of one of our steps (top operators by self CPU time) to show where the time goes.

    python benchmarks/bench_training_step.py [--preset base] [--batch 16] [--length 32] [--steps 5] [--device cpu]

`--device cuda` runs the same A/B on a GPU (fused Adam, `--bf16` autocast if asked; peak memory is then
`torch.cuda.max_memory_allocated`); the GPU check (benchmarks/gpu) reuses `build`, `make_batch` and `train_step`.

Results: benchmarks/results/training_step.json and .md.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.export.marian import to_marian
from vaswani_hf.modeling_vaswani import shift_tokens_right
from vaswani_hf.training.objective import LabelSmoothedLoss

RESULTS = Path(__file__).resolve().parent / "results"


def build(variant: str, preset: str, vocab: int, **overrides):
    """Our model (seed 0) or its `MarianMTModel` copy with identical weights; `overrides` change the preset's sizes
    (the GPU check's smoke run builds a tiny model this way)."""
    torch.manual_seed(0)
    config = getattr(VaswaniConfig, preset)(vocab_size=vocab, sinusoid_layout="concatenated", **overrides)
    ours = VaswaniForConditionalGeneration(config)
    if variant == "marian":
        model = to_marian(ours)
        del ours
    else:
        model = ours
        if variant == "ours_checkpointing":
            model.gradient_checkpointing_enable()
    model.config.use_cache = False
    return model.train()


def make_batch(batch: int, length: int, vocab: int, seed: int = 0, device: str | torch.device = "cpu"):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=g)
    labels = torch.randint(4, vocab, (batch, length), generator=g)
    # some padding, as a real length-bucketed batch has
    src[: batch // 4, -length // 4 :] = 0
    labels[: batch // 4, -length // 4 :] = -100
    return {k: v.to(device) for k, v in dict(input_ids=src, attention_mask=(src != 0).long(), labels=labels).items()}


def smoothing_of(variant: str) -> float:
    """The objective's epsilon: the paper's 0.1 for ours; Marian's loss and `ours_no_smoothing` have none."""
    return 0.1 if variant.startswith("ours") and variant != "ours_no_smoothing" else 0.0


def train_step(model, optimizer, batch, smoothing: float, autocast_dtype: torch.dtype | None = None):
    """One update as the trainer makes it: ours with the paper's objective (`LabelSmoothedLoss`, the trainer's
    compute_loss_func, from the logits), Marian and `ours_no_smoothing` with the model's own plain cross-entropy.
    `autocast_dtype` (torch.bfloat16): the forward under autocast on the batch's device, as `--bf16 true` trains.
    Returns the loss as a detached tensor: no host synchronisation inside the step (float() it outside)."""
    device_type = batch["labels"].device.type
    with torch.autocast(device_type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        if smoothing:
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            out = model(**inputs, decoder_input_ids=shift_tokens_right(batch["labels"], 0, 0))
            loss = LabelSmoothedLoss(smoothing)(out, batch["labels"])
        else:
            loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def make_optimizer(model, device: torch.device):
    """The paper's Adam (Section 5.3); fused on CUDA, as the trainer makes it there."""
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=device.type == "cuda")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously; a CPU step is done when it returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_variant(args) -> dict:
    """Child process: build one variant, run warm-up + timed steps, report time and peak memory."""
    device = torch.device(args.device)
    model = build(args.variant, args.preset, args.vocab).to(device)
    optimizer = make_optimizer(model, device)
    batch = make_batch(args.batch, args.length, args.vocab, device=device)
    tokens = int((batch["labels"] != -100).sum())
    smoothing = smoothing_of(args.variant)
    dtype = torch.bfloat16 if args.bf16 else None
    train_step(model, optimizer, batch, smoothing, dtype)  # warm-up
    times = []
    for _ in range(args.steps):
        synchronize(device)
        start = time.perf_counter()
        train_step(model, optimizer, batch, smoothing, dtype)
        synchronize(device)
        times.append(time.perf_counter() - start)
    if device.type == "cuda":  # the key keeps its name: the peak memory of this variant's process, on its device
        peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "variant": args.variant,
        "step_seconds": times,
        "target_tokens": tokens,
        "tokens_per_second": tokens / statistics.median(times),
        "peak_rss_mib": peak_mib,
    }


def profile_ours(args) -> str:
    model = build("ours", args.preset, args.vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    batch = make_batch(args.batch, args.length, args.vocab)
    train_step(model, optimizer, batch, smoothing_of("ours"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        float(train_step(model, optimizer, batch, smoothing_of("ours")))
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", choices=["base", "big"])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds, each in fresh processes")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (1: steadier on a shared machine)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (each variant in its own process on it)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast around the forward, as --bf16 true trains")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.variant:
        print(json.dumps(run_variant(args)))
        return

    variants = ["ours", "marian", "ours_no_smoothing", "ours_checkpointing"]
    runs = {v: [] for v in variants}
    load_before = os.getloadavg()[0]  # 1-minute load: other work on the machine skews every ratio
    for round_ in range(args.rounds):
        for variant in variants:
            cmd = [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--preset",
                args.preset,
                "--vocab",
                str(args.vocab),
                "--batch",
                str(args.batch),
                "--length",
                str(args.length),
                "--steps",
                str(args.steps),
                "--threads",
                str(args.threads),
                "--device",
                args.device,
                *(["--bf16"] if args.bf16 else []),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            runs[variant].append(json.loads(out))
            print(
                f"round {round_ + 1}: {variant:20s} {runs[variant][-1]['tokens_per_second']:8.1f} tok/s "
                f"peak {runs[variant][-1]['peak_rss_mib']:.0f} MiB",
                flush=True,
            )

    def median(variant, key):
        return statistics.median(r[key] for r in runs[variant])

    speed_ratios = [o["tokens_per_second"] / m["tokens_per_second"] for o, m in zip(runs["ours"], runs["marian"])]
    same_loss_ratios = [
        o["tokens_per_second"] / m["tokens_per_second"] for o, m in zip(runs["ours_no_smoothing"], runs["marian"])
    ]
    ckpt_time = [
        c["tokens_per_second"] / o["tokens_per_second"] for c, o in zip(runs["ours_checkpointing"], runs["ours"])
    ]
    summary = {
        "setup": {
            "preset": args.preset,
            "vocab": args.vocab,
            "batch": args.batch,
            "length": args.length,
            "steps": args.steps,
            "rounds": args.rounds,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "device": args.device,
            "bf16": args.bf16,
            "load_1min_before": load_before,
            "load_1min_after": os.getloadavg()[0],
        },
        "tokens_per_second": {v: median(v, "tokens_per_second") for v in variants},
        "peak_rss_mib": {v: median(v, "peak_rss_mib") for v in variants},
        "speed_ratio_ours_over_marian": statistics.median(speed_ratios),
        "speed_ratio_same_loss_over_marian": statistics.median(same_loss_ratios),
        "speed_ratios_per_round": speed_ratios,
        "memory_ratio_ours_over_marian": median("ours", "peak_rss_mib") / median("marian", "peak_rss_mib"),
        "checkpointing_speed_ratio": statistics.median(ckpt_time),
        "checkpointing_memory_ratio": median("ours_checkpointing", "peak_rss_mib") / median("ours", "peak_rss_mib"),
        "runs": runs,
    }
    table = profile_ours(args) if args.device == "cpu" else "(profile: CPU runs only)"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "training_step.json").write_text(json.dumps(summary, indent=2))
    md = [
        f"# Training step: ours vs MarianMTModel (identical weights), {args.preset}, {args.device}",
        "",
        f"batch {args.batch} x {args.length} tokens (25% of rows padded by a quarter), vocab {args.vocab}, "
        f"forward+backward+Adam, median of {args.rounds} rounds x {args.steps} steps, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; 1-minute load {summary['setup']['load_1min_before']:.1f} before, "
        f"{summary['setup']['load_1min_after']:.1f} after (the benchmark's own process counts 1).",
        "",
        "`ours`: the paper's loss (label smoothing 0.1); `ours_no_smoothing`: plain cross-entropy like Marian's.",
        "",
        "| variant | target tokens/s | peak memory (MiB: RSS on CPU, allocated on CUDA) |",
        "|---|---:|---:|",
        *[f"| {v} | {summary['tokens_per_second'][v]:.1f} | {summary['peak_rss_mib'][v]:.0f} |" for v in variants],
        "",
        f"- speed ours / Marian: **{summary['speed_ratio_ours_over_marian']:.3f}x** (median of per-round ratios; "
        f"rounds {min(speed_ratios):.3f}-{max(speed_ratios):.3f})",
        f"- speed ours without label smoothing (Marian's loss is plain cross-entropy) / Marian: "
        f"**{summary['speed_ratio_same_loss_over_marian']:.3f}x**",
        f"- peak memory ours / Marian: **{summary['memory_ratio_ours_over_marian']:.3f}x**",
        f"- gradient checkpointing: speed x{summary['checkpointing_speed_ratio']:.3f}, "
        f"peak memory x{summary['checkpointing_memory_ratio']:.3f}",
        "",
        "## Where our step's time goes (torch.profiler, self CPU time)",
        "",
        "```",
        table,
        "```",
    ]
    (RESULTS / "training_step.md").write_text("\n".join(md) + "\n")
    print("\n".join(md[:16]))


if __name__ == "__main__":
    main()
