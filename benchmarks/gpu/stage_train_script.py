"""Stage 5, the real command: `scripts/train.py --recipe wmt14-en-de-base --bf16 true` on a synthetic WMT-shaped corpus.

The corpus is `benchmarks/synthetic_wmt.py`'s (WMT14's word and length statistics; 40k pairs here, so 200 updates of
25k target tokens run ~3 epochs). Two launches of the same command, the same seed and data order: bf16, then fp32;
each 200 updates (smoke: 3, tiny model) with the loss logged every 5. Figures: launch to the end of the first update
(the run's own clock, metrics.json `run_clock`), updates/s and target tokens/s over training, peak GPU memory
(nvidia-smi, sampled every 0.5 s: the whole card, CUDA context included) or, on a CPU, the run's peak RSS; and the
bf16 loss curve against fp32's at the same updates (the post-norm model's bf16 stability: goal within 1%).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import REPO, Context, Recorder

GPU = dict(pairs=40_000, updates=200, logging=5)
SMOKE = dict(pairs=300, updates=3, logging=1)
SMOKE_MODEL = [
    "--vocab_size",
    "400",
    "--d_model",
    "32",
    "--d_ff",
    "64",
    "--num_heads",
    "2",
    "--num_encoder_layers",
    "1",
    "--num_decoder_layers",
    "1",
    "--tokens_per_step",
    "512",
    "--max_tokens_per_device",
    "512",
    "--torch_threads",
    "1",
    "--preprocessing_num_workers",
    "1",
]


def corpus(ctx: Context, pairs: int) -> Path:
    """The synthetic corpus in the work folder (written once; the decoding stage reads it too)."""
    from synthetic_wmt import write_corpus

    folder = ctx.work / f"synthetic_wmt_{pairs}"
    if not (folder / "test.de").exists():
        write_corpus(folder, pairs, held_out=64 if ctx.smoke else 2048, types=2000 if ctx.smoke else 100_000)
    return folder


class GpuMemorySampler(threading.Thread):
    """The card's used memory (nvidia-smi, MiB), its maximum over the run."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = None, threading.Event()

    def run(self):
        while not self.stop.is_set() and shutil.which("nvidia-smi"):
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            if out.isdigit():
                self.peak = max(self.peak or 0, int(out))
            self.stop.wait(0.5)


def launch(ctx: Context, data: Path, name: str, bf16: bool, sizes: dict) -> dict:
    out = ctx.work / f"train_{name}"
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "--recipe",
        "wmt14-en-de-base",
        "--data_format",
        "moses",
        "--data_dir",
        str(data),
        "--train_data",
        "train",
        "--valid_data",
        "null",
        "--test_data",
        "null",
        "--output_dir",
        str(out),
        "--overwrite",
        "true",
        "--max_steps",
        str(sizes["updates"]),
        "--logging_steps",
        str(sizes["logging"]),
        "--eval_steps",
        "0",
        "--save_every_minutes",
        "0",
        "--average_last",
        "0",
        "--disable_tqdm",
        "true",
        "--bf16",
        "true" if bf16 else "false",
        *(SMOKE_MODEL if ctx.smoke else []),
    ]
    env = dict(os.environ, HF_DATASETS_CACHE=str(ctx.work / "datasets_cache"), PYTHONUNBUFFERED="1")
    sampler = GpuMemorySampler() if ctx.on_gpu else None
    if sampler:
        sampler.start()
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=max(ctx.left() - 3, 1)
        )
    except subprocess.TimeoutExpired:
        return {"cut": f"scripts/train.py ran out of the stage's budget after {time.perf_counter() - started:.0f} s"}
    finally:
        if sampler:
            sampler.stop.set()
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return {"exit_code": done.returncode, "error_tail": (done.stdout + done.stderr).strip().splitlines()[-8:]}
    metrics = json.loads((out / "metrics.json").read_text())
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines() if line.strip()]
    clock = metrics.get("run_clock", {})
    return {
        "wall_s": round(wall, 1),
        "launch_to_first_update_s": clock.get("first_update", {}).get("done_s"),
        "updates": metrics["global_step"],
        "train_seconds": round(metrics["train_seconds"], 2),
        "updates_per_s": round(metrics["global_step"] / max(metrics["train_seconds"], 1e-9), 2),
        "target_tokens_per_s": round(metrics["train_tgt_tokens_per_second"]),
        "tokens_per_update": metrics["tokens_per_update"],
        "padding_share_tgt": metrics["padding_share_tgt"],
        "peak_gpu_memory_mib": sampler.peak if sampler else None,
        "peak_rss_mib": clock.get("peak_rss_mb"),
        "loss_curve": [[h["step"], round(h["loss"], 4)] for h in history if "loss" in h],
    }


def compare(bf16: list, fp32: list) -> dict:
    """Relative differences |bf16 - fp32| / fp32 of the loss at the updates both logged."""
    fp = dict((s, v) for s, v in fp32)
    diffs = [abs(v - fp[s]) / fp[s] for s, v in bf16 if s in fp]
    if not diffs:
        return {}
    return {
        "updates_compared": len(diffs),
        "max_relative_difference": round(max(diffs), 4),
        "mean_relative_difference": round(sum(diffs) / len(diffs), 4),
        "last_relative_difference": round(diffs[-1], 4),
    }


def run(ctx: Context, rec: Recorder) -> None:
    sizes = SMOKE if ctx.smoke else GPU
    started = time.perf_counter()
    data = corpus(ctx, sizes["pairs"])
    rec.set("corpus", {"pairs": sizes["pairs"], "folder": str(data), "seconds": round(time.perf_counter() - started)})
    for name, bf16 in (("bf16", True), ("fp32", False)):
        rec.set(name, launch(ctx, data, name, bf16, sizes))
        if "cut" in rec.data[name]:
            rec.set("cut", f"the {name} run: {rec.data[name]['cut']}")
            return
    if "loss_curve" in rec.data.get("bf16", {}) and "loss_curve" in rec.data.get("fp32", {}):
        rec.set("bf16_vs_fp32", compare(rec.data["bf16"]["loss_curve"], rec.data["fp32"]["loss_curve"]))


def markdown(result: dict) -> list[str]:
    lines = []
    if "corpus" in result:
        lines.append(
            f"- synthetic WMT-shaped corpus, {result['corpus']['pairs']:,} pairs (written in "
            f"{result['corpus']['seconds']} s)"
        )
    for name in ("bf16", "fp32"):
        r = result.get(name)
        if not r:
            continue
        if "cut" in r:
            lines.append(f"- {name}: **{r['cut']}**")
            continue
        if "error_tail" in r:
            lines.append(f"- {name}: **failed (exit {r['exit_code']})**")
            lines += [f"  > {line}" for line in r["error_tail"]]
            continue
        memory = (
            f"peak GPU memory {r['peak_gpu_memory_mib']:,} MiB (nvidia-smi)"
            if r["peak_gpu_memory_mib"]
            else f"peak RSS {r['peak_rss_mib']} MiB"
        )
        lines.append(
            f"- {name}: launch to first update **{r['launch_to_first_update_s']} s**, {r['updates']} updates "
            f"of {r['tokens_per_update']:,} target tokens in {r['train_seconds']} s: **{r['updates_per_s']} "
            f"updates/s, {r['target_tokens_per_s']:,} target tokens/s**, {memory}, padding "
            f"{r['padding_share_tgt']:.1%}; {r['wall_s']} s launch to exit"
        )
    c = result.get("bf16_vs_fp32")
    if c:
        lines.append(
            f"- bf16 loss against fp32 at {c['updates_compared']} logged updates: max relative difference "
            f"**{c['max_relative_difference']:.2%}**, mean {c['mean_relative_difference']:.2%}, last "
            f"{c['last_relative_difference']:.2%} (goal: within 1%)"
        )
        curves = {n: dict(result[n]["loss_curve"]) for n in ("bf16", "fp32")}
        steps = sorted(set(curves["bf16"]) & set(curves["fp32"]))
        picked = steps[:: max(len(steps) // 8, 1)] + ([steps[-1]] if steps else [])
        lines.append(
            "- loss (update: bf16 / fp32): "
            + ", ".join(f"{s}: {curves['bf16'][s]:.3f} / {curves['fp32'][s]:.3f}" for s in dict.fromkeys(picked))
        )
    return lines
