#!/usr/bin/env python
"""bf16 against fp32 training of the post-norm Transformer (issue 53): the validation curves of two runs that differ
only in `--bf16`, at a size where bf16 gains. Not a test.

docs/reproducing-the-paper.md lists the post-norm model's bf16 stability as what only a GPU could show; the numerics
of bf16 autocast are the same on a CPU with bf16 matrix units (AMX, AVX-512 BF16: bf16 products accumulated in fp32,
LayerNorm, softmax and the loss in fp32, fp32 weights and Adam), so this runs `scripts/train.py` twice on Multi30k
with the paper's base sizes (d_model 512, d_ff 2048, 8 heads, 6+6 layers; the multi30k-en-de recipe otherwise: its
data, BPE 8,000 and 1,024-token batches), the same seed and batch order, fp32 then bf16, with the warm-up shortened
to `--warmup_steps` so that the runs pass the learning rate's peak (where a post-norm model diverges, if it does)
within `--max_steps`. Validation loss (label-smoothed) and greedy BLEU every `--eval_steps` updates, on the first
`--valid_sentences` validation pairs; the training tokens/s of each. The processor's bf16 units are recorded: where
it has none, bf16 is emulated (slow) and only the curve, not the speed, means something.

    python benchmarks/bench_bf16_curve.py              # 3,000 updates each: ~3 h on 2 quiet cores with bf16 units
    python benchmarks/bench_bf16_curve.py --smoke      # the bundled sample corpus, a tiny model, 8 updates each

Results: benchmarks/results/bf16_curve.json, .md and .png (`--out` stem); the runs in `--work_dir`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE = dict(d_model=512, d_ff=2048, num_heads=8, num_encoder_layers=6, num_decoder_layers=6)
TINY = dict(d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1, num_decoder_layers=1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max_steps", type=int, default=3000)
    p.add_argument("--warmup_steps", type=int, default=1000, help="the recipe's 4,000, shortened (docstring)")
    p.add_argument("--eval_steps", type=int, default=250)
    p.add_argument("--valid_sentences", type=int, default=500, help="validation pairs scored (0: all 1,014)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work_dir", default="/tmp/vaswani_bench_bf16_curve", help="the two runs (not the repo)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bf16_curve"), help="output stem")
    p.add_argument(
        "--size",
        default="base",
        choices=("base", "recipe"),
        help="base: the paper's base sizes; recipe: the multi30k-en-de recipe's own 6.0M model, where bf16 already "
        "gains on a CPU with AVX-512 BF16 (benchmarks/results/training_step_bf16_small.md) and the curve is quick",
    )
    p.add_argument("--smoke", action="store_true", help="the sample corpus, a tiny model, 8 updates")
    args = p.parse_args(argv)
    if min(args.max_steps, args.eval_steps, args.threads) < 1 or args.eval_steps > args.max_steps:
        p.error("--max_steps, --eval_steps and --threads must be >= 1, and --eval_steps <= --max_steps")
    if args.smoke:
        args.max_steps, args.warmup_steps, args.eval_steps, args.valid_sentences = 8, 4, 4, 8
    return args


def train_command(args, precision: str) -> list[str]:
    """scripts/train.py with the recipe, the model's sizes, the shortened schedule and the evaluation; nothing saved
    but the final checkpoint, no test scores (the curve is the result)."""
    recipe = "default" if args.smoke else "multi30k-en-de"
    keys = {
        **(TINY if args.smoke else BASE if args.size == "base" else {}),
        "output_dir": Path(args.work_dir) / precision,
        "bf16": "true" if precision == "bf16" else "false",
        "max_steps": args.max_steps,
        "warmup_steps": args.warmup_steps,
        "eval_steps": args.eval_steps,
        "eval_num_beams": 1,
        "max_eval_samples": args.valid_sentences,
        "test_data": "null",
        "save_every_minutes": 10**6,
        "keep_last": 1,
        "average_last": 1,
        "torch_threads": args.threads,
        "disable_tqdm": "true",
        "translate_examples": "[]",
    }
    command = [sys.executable, str(REPO / "scripts" / "train.py"), "--recipe", recipe, "--overwrite"]
    for key, value in keys.items():
        command += [f"--{key}", str(value)]
    return command


def read_history(folder: Path) -> list[dict]:
    path = folder / "history.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def compare(histories: dict[str, list[dict]], speeds: dict[str, float]) -> dict:
    """The validation points of both runs side by side, the largest relative difference of the validation loss, and
    each run's training speed (`speeds`: real target tokens/s, from its metrics.json)."""
    points = {
        precision: {row["step"]: row for row in rows if "eval_loss" in row} for precision, rows in histories.items()
    }
    steps = sorted(set(points["fp32"]) & set(points["bf16"]))
    table = []
    for step in steps:
        a, b = points["fp32"][step], points["bf16"][step]
        table.append(
            {
                "step": step,
                "eval_loss": {"fp32": a["eval_loss"], "bf16": b["eval_loss"]},
                "relative_difference": round(abs(b["eval_loss"] - a["eval_loss"]) / abs(a["eval_loss"]), 4),
                "eval_bleu": {"fp32": a.get("eval_bleu"), "bf16": b.get("eval_bleu")},
            }
        )
    return {
        "points": table,
        "max_relative_difference": max((row["relative_difference"] for row in table), default=None),
        "target_tokens_per_second": {precision: round(speed, 1) for precision, speed in speeds.items()},
        "bf16_over_fp32_speed": round(speeds["bf16"] / speeds["fp32"], 3),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for precision in ("fp32", "bf16"):
        steps = [row["step"] for row in result["points"]]
        axis.plot(steps, [row["eval_loss"][precision] for row in result["points"]], "o-", label=precision)
    axis.set_xlabel("updates")
    axis.set_ylabel("validation loss (label-smoothed)")
    axis.set_title("post-norm Transformer, bf16 autocast vs fp32")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def markdown(report: dict) -> str:
    result, cpu = report["result"], report["cpu"]
    lines = [
        f"# bf16 against fp32 training: validation curves (post-norm, {report.get('size', 'base')} sizes)",
        "",
        f"- {report['date']}, {cpu['summary']}; torch kernels {cpu['torch_kernels']}; {report['threads']} threads; "
        f"load average before / after {report['load_average']}",
        f"- {report['max_steps']} updates each, warm-up {report['warmup_steps']}, validation every "
        f"{report['eval_steps']} updates; commands in the JSON",
        f"- largest relative difference of the validation loss: **{result['max_relative_difference']}**; training "
        f"speed bf16 / fp32: **{result['bf16_over_fp32_speed']}x** (real target tokens/s: "
        f"{result['target_tokens_per_second']})",
    ]
    if cpu["bf16_units"] == "none":
        lines.append("- this processor has NO bf16 matrix units: bf16 is emulated, its speed means nothing here")
    lines += [
        "",
        "| updates | loss fp32 | loss bf16 | relative difference | BLEU fp32 | BLEU bf16 |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["points"]:
        loss, bleu = row["eval_loss"], row["eval_bleu"]
        lines.append(
            f"| {row['step']} | {loss['fp32']:.4f} | {loss['bf16']:.4f} | {row['relative_difference']} "
            f"| {bleu['fp32']} | {bleu['bf16']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = parse_args(argv)
    from vaswani_hf.precision import cpu_record

    load_before = round(os.getloadavg()[0], 2)
    commands, histories, speeds = {}, {}, {}
    for precision in ("fp32", "bf16"):
        commands[precision] = [str(x) for x in train_command(args, precision)]
        print(f"training in {precision}: {' '.join(commands[precision])}", file=sys.stderr, flush=True)
        subprocess.run(commands[precision], check=True, cwd=str(REPO))
        folder = Path(args.work_dir) / precision
        histories[precision] = read_history(folder)
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        speeds[precision] = metrics["train_tgt_tokens_per_second"]
    report = {
        "benchmark": "bf16 autocast against fp32 training, validation curves (issue 53)",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpu": cpu_record(),
        "threads": args.threads,
        "size": args.size,
        "max_steps": args.max_steps,
        "warmup_steps": args.warmup_steps,
        "eval_steps": args.eval_steps,
        "load_average": [load_before, round(os.getloadavg()[0], 2)],
        "commands": commands,
        "result": compare(histories, speeds),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    plot(report["result"], out.with_suffix(".png"))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
