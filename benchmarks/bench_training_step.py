"""Training-step throughput and peak memory: our model vs `MarianMTModel` with identical weights (issue 2).

One run, CPU, the paper's base configuration (37k shared vocabulary) unless told otherwise:
- forward + backward + Adam step, target tokens per second, ours and Marian's, interleaved A B A B ... so that
  machine drift affects both; the ratio is taken pair by pair and its median reported;
- peak resident memory of each variant in its own fresh process (`resource.getrusage`);
- the same for our model with gradient checkpointing (memory saved vs time cost);
- a profile of one of our steps (top operators by self CPU time) to show where the time goes.

    python benchmarks/bench_training_step.py [--preset base] [--batch 16] [--length 32] [--steps 5] [--device cpu]

Precision (issue 53): `--precisions fp32,bf16` runs every variant in fp32 and under bf16 autocast (as `--bf16 true`
trains), interleaved, and reports bf16 / fp32 per variant and ours against Marian each at its best precision, with
the processor's bf16 units recorded (`vaswani_hf.precision.cpu_record`): on a CPU without bf16 matrix units bf16 is
emulated, which the report says. `--preset multi30k` is the Multi30k recipe's 6M model (with `--vocab 8000`): the
two sizes bracket the `bf16: auto` threshold for training (`precision.BF16_MIN_PARAMETERS["training"]`).

    python benchmarks/bench_training_step.py --precisions fp32,bf16 --variants ours,marian --threads 2 \
        --rounds 5 --out benchmarks/results/training_step_bf16                       # base size: ~10 min, 2 cores
    python benchmarks/bench_training_step.py --precisions fp32,bf16 --variants ours,marian --threads 2 \
        --rounds 5 --preset multi30k --vocab 8000 --batch 64 --length 24 --out benchmarks/results/training_step_bf16_small

`--device cuda` runs the same A/B on a GPU (fused Adam, `--bf16` autocast if asked; peak memory is then
`torch.cuda.max_memory_allocated`); the GPU check (benchmarks/gpu) reuses `build`, `make_batch` and `train_step`.

Results: benchmarks/results/training_step.json and .md (`--out` stem).
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

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration, precision
from vaswani_hf.export.marian import to_marian
from vaswani_hf.modeling_vaswani import shift_tokens_right
from vaswani_hf.training.objective import LabelSmoothedLoss

RESULTS = Path(__file__).resolve().parent / "results"
# --preset: a Table 3 model (VaswaniConfig.base / .big), or the Multi30k recipe's sizes over the base's other settings
PRESETS = {
    "base": ("base", {}),
    "big": ("big", {}),
    "multi30k": ("base", dict(d_model=256, d_ff=512, num_heads=4, num_encoder_layers=3, num_decoder_layers=3)),
}


def build(variant: str, preset: str, vocab: int, **overrides):
    """Our model (seed 0) or its `MarianMTModel` copy with identical weights; `overrides` change the preset's sizes
    (the GPU check's smoke run builds a tiny model this way)."""
    torch.manual_seed(0)
    table, sizes = PRESETS[preset]
    config = getattr(VaswaniConfig, table)(vocab_size=vocab, sinusoid_layout="concatenated", **{**sizes, **overrides})
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
    """torch.profiler's table of one of our steps, at the last precision compared (bf16 where it is)."""
    model = build("ours", args.preset, args.vocab)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    batch = make_batch(args.batch, args.length, args.vocab)
    dtype = torch.bfloat16 if args.precisions[-1] == "bf16" else None
    train_step(model, optimizer, batch, smoothing_of("ours"), dtype)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        float(train_step(model, optimizer, batch, smoothing_of("ours"), dtype))
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="base", choices=list(PRESETS))
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
    parser.add_argument(
        "--precisions", default=None, help="fp32, bf16 or fp32,bf16 (default: fp32, or bf16 with --bf16)"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--out", default=str(RESULTS / "training_step"), help="output stem (.json, .md)")
    parser.add_argument("--no_profile", action="store_true", help="skip the profile of one of our steps")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.precisions = (args.precisions or ("bf16" if args.bf16 else "fp32")).split(",")
    args.variants = args.variants.split(",")
    if set(args.precisions) - {"fp32", "bf16"} or set(args.variants) - set(VARIANTS) or "ours" not in args.variants:
        parser.error(f"--precisions of fp32, bf16; --variants of {', '.join(VARIANTS)}, with ours")
    return args


VARIANTS = ("ours", "marian", "ours_no_smoothing", "ours_checkpointing")


def label(variant: str, precision_name: str, precisions: list[str]) -> str:
    """A run's name: the variant, with its precision when several are compared ("ours@bf16")."""
    return variant if precisions == ["fp32"] or precisions == [precision_name] else f"{variant}@{precision_name}"


def run_child(args, variant: str, precision_name: str) -> dict:
    """One variant at one precision in a fresh process (its peak memory is its own)."""
    cmd = [sys.executable, __file__, "--variant", variant, "--preset", args.preset, "--vocab", str(args.vocab)]
    cmd += ["--batch", str(args.batch), "--length", str(args.length), "--steps", str(args.steps)]
    cmd += ["--threads", str(args.threads), "--device", args.device, *(["--bf16"] if precision_name == "bf16" else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    return json.loads(out)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.variant:
        print(json.dumps(run_variant(args)))
        return

    names = [(v, p, label(v, p, args.precisions)) for p in args.precisions for v in args.variants]
    runs = {name: [] for *_, name in names}
    load_before = os.getloadavg()[0]  # 1-minute load: other work on the machine skews every ratio
    for round_ in range(args.rounds):
        for variant, precision_name, name in names:
            runs[name].append(run_child(args, variant, precision_name))
            print(
                f"round {round_ + 1}: {name:24s} {runs[name][-1]['tokens_per_second']:8.1f} tok/s "
                f"peak {runs[name][-1]['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    summary = summarise(args, runs, load_before)
    table = profile_ours(args) if args.device == "cpu" and not args.no_profile else "(profile: skipped)"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    md = markdown(args, summary, table)
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md[:24]))
    return summary


def ratios(runs: dict, a: str, b: str) -> list[float]:
    """Per-round ratios of a's tokens/s to b's (the same round: the same machine drift)."""
    return [x["tokens_per_second"] / y["tokens_per_second"] for x, y in zip(runs[a], runs[b])]


def summarise(args, runs: dict, load_before: float) -> dict:
    def median(name, key):
        return statistics.median(r[key] for r in runs[name])

    def at(variant, precision_name):
        return label(variant, precision_name, args.precisions)

    base = args.precisions[0]
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
            "precisions": args.precisions,
            "cpu": precision.cpu_record() if args.device == "cpu" else None,
            "load_1min_before": load_before,
            "load_1min_after": os.getloadavg()[0],
        },
        "tokens_per_second": {name: median(name, "tokens_per_second") for name in runs},
        "peak_rss_mib": {name: median(name, "peak_rss_mib") for name in runs},
        "runs": runs,
    }
    if "marian" in args.variants:
        speed = ratios(runs, at("ours", base), at("marian", base))
        summary["speed_ratio_ours_over_marian"] = statistics.median(speed)
        summary["speed_ratios_per_round"] = speed
        summary["memory_ratio_ours_over_marian"] = median(at("ours", base), "peak_rss_mib") / median(
            at("marian", base), "peak_rss_mib"
        )
    if "marian" in args.variants and "ours_no_smoothing" in args.variants:
        same_loss = ratios(runs, at("ours_no_smoothing", base), at("marian", base))
        summary["speed_ratio_same_loss_over_marian"] = statistics.median(same_loss)
    if "ours_checkpointing" in args.variants:
        summary["checkpointing_speed_ratio"] = statistics.median(
            ratios(runs, at("ours_checkpointing", base), at("ours", base))
        )
        summary["checkpointing_memory_ratio"] = median(at("ours_checkpointing", base), "peak_rss_mib") / median(
            at("ours", base), "peak_rss_mib"
        )
    if args.precisions == ["fp32", "bf16"]:
        summary["bf16_over_fp32"] = {
            v: statistics.median(ratios(runs, at(v, "bf16"), at(v, "fp32"))) for v in args.variants
        }
        best = {
            v: max(args.precisions, key=lambda p, v=v: median(at(v, p), "tokens_per_second")) for v in args.variants
        }
        summary["best_precision"] = best
        if "marian" in args.variants:
            summary["ours_best_over_marian_best"] = statistics.median(
                ratios(runs, at("ours", best["ours"]), at("marian", best["marian"]))
            )
    return summary


def markdown(args, summary: dict, table: str) -> list[str]:
    setup = summary["setup"]
    cpu = setup["cpu"]
    units = "" if cpu is None else f"; {cpu['summary']}, torch kernels {cpu['torch_kernels']}"
    if cpu is not None and cpu["bf16_units"] == "none":
        units += " (NO bf16 matrix units: bf16 is emulated here)"
    md = [
        f"# Training step: ours vs MarianMTModel (identical weights), {args.preset}, {args.device}",
        "",
        f"batch {args.batch} x {args.length} tokens (25% of rows padded by a quarter), vocab {args.vocab}, "
        f"forward+backward+Adam, median of {args.rounds} rounds x {args.steps} steps, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads{units}; 1-minute load {setup['load_1min_before']:.1f} before, "
        f"{setup['load_1min_after']:.1f} after (the benchmark's own process counts 1).",
        "",
        "`ours`: the paper's loss (label smoothing 0.1); `ours_no_smoothing`: plain cross-entropy like Marian's; "
        "`@bf16`: under bf16 autocast, as `--bf16 true` trains (weights and Adam in fp32).",
        "",
        "| variant | target tokens/s | peak memory (MiB: RSS on CPU, allocated on CUDA) |",
        "|---|---:|---:|",
        *[
            f"| {name} | {summary['tokens_per_second'][name]:.1f} | {summary['peak_rss_mib'][name]:.0f} |"
            for name in summary["tokens_per_second"]
        ],
        "",
    ]
    if "speed_ratio_ours_over_marian" in summary:
        speed = summary["speed_ratios_per_round"]
        md.append(
            f"- speed ours / Marian ({args.precisions[0]}): **{summary['speed_ratio_ours_over_marian']:.3f}x** "
            f"(median of per-round ratios; rounds {min(speed):.3f}-{max(speed):.3f}); peak memory "
            f"{summary['memory_ratio_ours_over_marian']:.3f}x"
        )
    if "speed_ratio_same_loss_over_marian" in summary:
        md.append(
            "- speed ours without label smoothing (Marian's loss is plain cross-entropy) / Marian: "
            f"**{summary['speed_ratio_same_loss_over_marian']:.3f}x**"
        )
    if "checkpointing_speed_ratio" in summary:
        md.append(
            f"- gradient checkpointing: speed x{summary['checkpointing_speed_ratio']:.3f}, "
            f"peak memory x{summary['checkpointing_memory_ratio']:.3f}"
        )
    if "bf16_over_fp32" in summary:
        ratio_text = ", ".join(f"{v} **{r:.3f}x**" for v, r in summary["bf16_over_fp32"].items())
        md.append(f"- bf16 autocast / fp32 (median of per-round ratios): {ratio_text}")
        md.append(f"- each at its best precision: {summary['best_precision']}")
        if "ours_best_over_marian_best" in summary:
            md.append(f"- ours / Marian, each at its best: **{summary['ours_best_over_marian_best']:.3f}x**")
    md += ["", "## Where our step's time goes (torch.profiler, self CPU time)", "", "```", table, "```"]
    return md


if __name__ == "__main__":
    main()
