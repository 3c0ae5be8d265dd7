#!/usr/bin/env python
"""The paper's experiment at full size, rehearsed on this machine: the `wmt14-en-de-base` pipeline on a synthetic
corpus of WMT14's shape (benchmarks/synthetic_wmt.py; the real data cannot be downloaded here) at several sizes.

Not a test. For each size, two launches of the real command line, as a user runs it:

    python scripts/train.py --recipe wmt14-en-de-base --data_format moses --data_dir CORPUS --train_data train
        --valid_data null --test_data null --max_steps 2 --save_steps 1 --keep_last 2 --average_last 2 ...

1. cold: joint BPE of 37k on both sides, tokenisation (`datasets` map, cached), length filtering, token batching
   (25k target tokens per update: 8 micro-batches of 3,125 on one process), two updates of the real base model, a
   checkpoint after each, averaging of the two;
2. warm: the same command with `--resume --max_steps 3`: the tokenizer and the tokenized data come from the caches,
   the run resumes from checkpoint-2, makes one more update and averages again.
Per launch: wall time, peak resident memory of the whole process tree (sampled every 0.2 s: the main process and
the `Dataset.map` workers together) and of the largest single process, each stage's time (the run's own clock,
metrics.json `run_clock`), time from launch to the first update, and the disk used by the caches. Then the token
batcher is built for 1 and 2 ranks on the cached lengths (sharding) and timed.

    python benchmarks/bench_wmt_scale.py --sizes 500000,1000000,2000000,4500000 --work /tmp/wmt-scale

Results: benchmarks/results/wmt_scale.{json,md,png}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from synthetic_wmt import write_corpus  # noqa: E402


def du_mb(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
    return round(total / 2**20, 1)


def run_sampled(command: list[str], env: dict, log: Path) -> dict:
    """Run `command`, sampling the resident memory of its process tree every 0.2 s."""
    import psutil

    started = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        parent = psutil.Process(proc.pid)
        peak_tree = peak_single = peak_private = 0
        while proc.poll() is None:
            try:
                infos = [p.memory_info() for p in [parent, *parent.children(recursive=True)]]
            except psutil.Error:
                infos = []
            sizes = [i.rss for i in infos] or [0]
            private = sum(i.rss - getattr(i, "shared", 0) for i in infos)  # without file pages (the mapped corpus)
            peak_tree, peak_single = max(peak_tree, sum(sizes)), max(peak_single, max(sizes))
            peak_private = max(peak_private, private)
            time.sleep(0.2)
    return {
        "exit": proc.returncode,
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_tree_rss_mb": round(peak_tree / 2**20, 1),
        "peak_process_rss_mb": round(peak_single / 2**20, 1),
        "peak_tree_private_mb": round(peak_private / 2**20, 1),
    }


def launch(corpus: Path, out: Path, cache: Path, log: Path, extra: list[str], threads: int) -> dict:
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "--recipe",
        "wmt14-en-de-base",
        "--data_format",
        "moses",
        "--data_dir",
        str(corpus),
        "--train_data",
        "train",
        "--valid_data",
        "null",
        "--test_data",
        "null",
        "--output_dir",
        str(out),
        "--save_steps",
        "1",
        "--keep_last",
        "2",
        "--average_last",
        "2",
        "--eval_steps",
        "0",
        "--save_every_minutes",
        "0",
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        "--torch_threads",
        str(threads),
        *extra,
    ]
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache), TOKENIZERS_PARALLELISM="true", PYTHONUNBUFFERED="1")
    result = run_sampled(command, env, log)
    metrics_file = out / "metrics.json"
    if result["exit"] == 0 and metrics_file.is_file():
        metrics = json.loads(metrics_file.read_text())
        result["run_clock"] = metrics.get("run_clock")
        result["filter_report"] = metrics.get("filter_report")
        result["global_step"] = metrics.get("global_step")
    result["cache_mb"] = du_mb(cache)
    result["output_mb"] = du_mb(out)
    return result


def sharding(corpus: Path, cache: Path, out: Path) -> dict:
    """The cached training set as a third launch sees it (corpus and tokenized data from the caches), and the token
    batcher built on it for 1 and 2 ranks, timed in a fresh process (its peak memory too)."""
    code = f"""
import json, resource, time
t0 = time.perf_counter()
from vaswani_hf.data.batching import TokenBatchSampler
from vaswani_hf.data.corpora import load_corpus
from vaswani_hf.data.preprocessing import prepare_dataset, sequence_lengths
from vaswani_hf.tokenization import load_tokenizer
raw = load_corpus("moses", {str(corpus / "train")!r}, "en", "de")
tok = load_tokenizer({str(out / "tokenizer")!r})
t = time.perf_counter(); train, _ = prepare_dataset(raw, tok, "en", "de", max_length=256, max_ratio=9.0)
result = {{"pairs": len(train), "cached_data_s": round(time.perf_counter() - t0, 2)}}
t = time.perf_counter(); src, tgt = sequence_lengths(train, "input_ids"), sequence_lengths(train, "labels")
result["lengths_s"] = round(time.perf_counter() - t, 2)
for world in (1, 2):
    t = time.perf_counter()
    samplers = [TokenBatchSampler(src, tgt, 3125, num_replicas=world, rank=r, seed=42) for r in range(world)]
    result[f"ranks{{world}}_s"] = round(time.perf_counter() - t, 2)
    result[f"ranks{{world}}_batches_per_rank"] = len(samplers[0])
result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
print(json.dumps(result))
"""
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-800:]}


def _stage(launch: dict, name: str) -> float | None:
    return ((launch.get("run_clock") or {}).get("stages") or {}).get(name, {}).get("seconds")


def report(results: dict, stem: str) -> None:
    """benchmarks/results/wmt_scale.md (a table) and .png (time and memory against corpus size)."""
    rows = sorted(results["sizes"].items(), key=lambda item: int(item[0]))
    lines = [
        "| pairs | corpus | BPE 37k | tokenize + filter | cold: to first update | one update (25k tokens) | "
        "cold: peak memory (tree / private) | warm: to first update | warm: peak memory | caches | batcher, 1 / 2 "
        "ranks |",
        "|" + "---|" * 11,
    ]
    for size, row in rows:
        cold, warm, shard = row["cold"], row["warm"], row.get("sharding", {})
        first = (cold.get("run_clock") or {}).get("first_update", {})
        warm_first = (warm.get("run_clock") or {}).get("first_update", {})
        lines.append(
            f"| {int(size) / 1e6:g}M | {row['corpus_mb'] / 1024:.2f} GiB | {_stage(cold, 'tokenizer') or 0:.0f} s | "
            f"{_stage(cold, 'tokenize and filter') or 0:.0f} s | {first.get('started_s', 0):.0f} s | "
            f"{first.get('seconds', 0):.0f} s | {cold['peak_tree_rss_mb'] / 1024:.1f} / "
            f"{cold.get('peak_tree_private_mb', 0) / 1024:.1f} GiB | {warm_first.get('started_s', 0):.0f} s | "
            f"{warm['peak_tree_rss_mb'] / 1024:.1f} GiB | {cold['cache_mb'] / 1024:.2f} GiB | "
            f"{shard.get('ranks1_s', '-')} / {shard.get('ranks2_s', '-')} s |"
        )
    Path(stem + ".md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(size) / 1e6 for size, _ in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    series = {
        "cold launch to first update": [
            (r["cold"].get("run_clock") or {}).get("first_update", {}).get("started_s") for _, r in rows
        ],
        "BPE 37k": [_stage(r["cold"], "tokenizer") for _, r in rows],
        "tokenize + filter": [_stage(r["cold"], "tokenize and filter") for _, r in rows],
        "warm launch to first update": [
            (r["warm"].get("run_clock") or {}).get("first_update", {}).get("started_s") for _, r in rows
        ],
    }
    for label, values in series.items():
        left.plot(sizes, [v if v is not None else float("nan") for v in values], "o-", label=label)
    left.set(xlabel="training pairs (millions)", ylabel="seconds", title="Time (2 CPU cores)")
    left.axhline(120, color="grey", ls=":", lw=1)
    for label, key in (
        ("cold, process tree", "peak_tree_rss_mb"),
        ("cold, private (without mapped files)", "peak_tree_private_mb"),
    ):
        right.plot(sizes, [r["cold"].get(key, 0) / 1024 for _, r in rows], "o-", label=label)
    right.plot(sizes, [r["warm"]["peak_tree_rss_mb"] / 1024 for _, r in rows], "o-", label="warm, process tree")
    right.axhline(8, color="grey", ls=":", lw=1)
    right.set(xlabel="training pairs (millions)", ylabel="GiB", title="Peak resident memory")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("wmt14-en-de-base pipeline on a synthetic WMT-shaped corpus")
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="500000,1000000,2000000,4500000", help="training pairs, comma-separated")
    parser.add_argument("--work", default="/tmp/wmt-scale", help="corpora, caches and runs (not in the repository)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the training process")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "wmt_scale"), help="result path stem")
    args = parser.parse_args(argv)
    work = Path(args.work)
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "sizes": {},
    }
    for size in [int(x) for x in args.sizes.split(",")]:
        corpus, cache, out = work / f"corpus-{size}", work / f"cache-{size}", work / f"run-{size}"
        if not (corpus / "train.de").is_file():
            started = time.perf_counter()
            write_corpus(corpus, size)
            print(f"{size:,} pairs written in {time.perf_counter() - started:.0f} s", flush=True)
        row = {"corpus_mb": du_mb(corpus)}
        row["cold"] = launch(corpus, out, cache, work / f"cold-{size}.log", ["--max_steps", "2"], args.threads)
        row["warm"] = launch(
            corpus, out, cache, work / f"warm-{size}.log", ["--max_steps", "3", "--resume"], args.threads
        )
        row["sharding"] = sharding(corpus, cache, out)
        row["load_after"] = os.getloadavg()
        results["sizes"][str(size)] = row
        print(json.dumps({size: row}, indent=1), flush=True)
        Path(args.out + ".json").write_text(json.dumps(results, indent=1) + "\n")
        report(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
