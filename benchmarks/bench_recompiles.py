#!/usr/bin/env python
"""Benchmark (not a test): how often `torch.compile` compiles the model over real token batches, by padding.

Token batches (Section 5.1) have a new (sentences, source length, target length) shape almost every batch. A model
compiled with static shapes (`dynamic=False`) compiles once per shape, and after dynamo's recompile limit (8) runs
that frame eagerly; padding the lengths to a multiple (`pad_to_multiple_of`, a recipe key) bounds the shapes, at the
price of padded slots; `dynamic=None` (torch's default, what transformers' `torch_compile` passes through Accelerate)
recompiles once with symbolic sizes after the first new shape; `dynamic=True` traces symbolic sizes from the start.

Here: Multi30k train (BPE trained on the fly, read from --multi30k at run time), the first --batches token batches of
`TokenBatchSampler` (--max_tokens padded tokens, the recipe's max_tokens_per_device, epoch 0 order), a small model
(the count does not depend on its size) compiled with --backend, forward only under `no_grad` (the guards on
shapes, hence the count, are the forward's: a training step compiles its backward once per forward graph). The
recompile limit is raised so that every compile is counted. `--backend eager` counts dynamo's graphs (the
recompile decisions are dynamo's) without AOT tracing, which takes seconds per graph on a loaded 2-core machine.
Reported: distinct batch shapes, graphs compiled (`torch._dynamo` counters), seconds for all batches (compile
included), and the padding share of the target slots.

Usage: python benchmarks/bench_recompiles.py [--device cpu] [--batches 200] [--backend aot_eager]
Writes benchmarks/results/recompiles.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.data.batching import Seq2SeqCollator, TokenBatchSampler
from vaswani_hf.data.corpora import load_corpus
from vaswani_hf.data.preprocessing import prepare_dataset, sequence_lengths
from vaswani_hf.tokenization import train_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_M30K = Path(os.environ.get("VASWANI_MULTI30K_DIR", ROOT.parent / "shared" / "data" / "multi30k" / "raw"))
SETTINGS = [(None, False), (8, False), (64, False), (None, None), (None, True)]  # (pad_to_multiple_of, dynamic)


def token_batches(data, max_tokens: int, count: int, pad: int | None) -> list[dict]:
    src, tgt = sequence_lengths(data, "input_ids"), sequence_lengths(data, "labels")
    sampler = TokenBatchSampler(src, tgt, max_tokens, seed=0, pad_to_multiple_of=pad)
    collate, batches = Seq2SeqCollator(pad_to_multiple_of=pad), []
    for epoch in range(-(-count // len(sampler))):  # Multi30k at 4096 tokens: ~130 batches an epoch
        sampler.set_epoch(epoch)
        batches.extend(collate([data[i] for i in indices]) for indices in sampler)
    return batches[:count]


def count_compiles(model, batches: list[dict], backend: str, dynamic, device: str, budget_s: float) -> dict:
    """Graphs compiled over `batches`, stopping after `budget_s` seconds (then `batches_run` says how far it got)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    start, done = time.perf_counter(), 0
    with torch.no_grad():
        for batch in batches:
            inputs = {k: v.to(device) for k, v in batch.items() if k != "labels"}
            compiled(**inputs)
            done += 1
            if time.perf_counter() - start > budget_s:
                break
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    graphs = int(counters["stats"]["unique_graphs"])
    breaks = sum(counters["graph_break"].values())
    torch._dynamo.reset()
    return {"batches_run": done, "graphs_compiled": graphs, "graph_breaks": breaks, "seconds": round(seconds, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--multi30k", type=Path, default=DEFAULT_M30K)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--max_tokens", type=int, default=4096)
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--vocab_size", type=int, default=8000)
    ap.add_argument("--budget_s", type=float, default=25.0, help="seconds per setting; a setting cut short says so")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 100_000)  # count every compile instead of falling back to eager

    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    tok = train_bpe_tokenizer(
        [args.multi30k / "train.en", args.multi30k / "train.de"], vocab_size=args.vocab_size, show_progress=False
    )
    data, _ = prepare_dataset(load_corpus("moses", args.multi30k / "train", "en", "de"), tok, "en", "de")
    config = VaswaniConfig(
        vocab_size=len(tok), d_model=32, d_ff=64, num_heads=4, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config).to(args.device).eval()
    rows = []
    for pad, dynamic in SETTINGS:
        batches = token_batches(data, args.max_tokens, args.batches, pad)
        shapes = [tuple(b["input_ids"].shape) + (b["labels"].shape[1],) for b in batches]
        compiles = count_compiles(model, batches, args.backend, dynamic, args.device, args.budget_s)
        real = sum(int((b["labels"] != -100).sum()) for b in batches)
        slots = sum(b["labels"].numel() for b in batches)
        row = {
            "pad_to_multiple_of": pad,
            "dynamic": dynamic,
            "batches": len(batches),
            "distinct_shapes": len(set(shapes)),
            "target_padding_share": round(1 - real / slots, 3),
            "distinct_shapes_in_batches_run": len(set(shapes[: compiles["batches_run"]])),
            **compiles,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    result = {
        "device": args.device,
        "backend": args.backend,
        "max_tokens": args.max_tokens,
        "torch": torch.__version__,
        "processor": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recompiles.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# torch.compile recompiles over {args.batches} Multi30k token batches ({args.max_tokens} tokens, "
        f"backend {args.backend}, device {args.device}, torch {torch.__version__}, load average "
        f"{result['load_average'][0]:.1f})",
        "",
        "Written by `benchmarks/bench_recompiles.py` (forward only, "
        "`no_grad`, a 1+1-layer d_model 32 model: the count depends on shapes, not on size). Each setting runs "
        f"at most {args.budget_s:.0f} s; `batches run` says how far it got (then the graphs are those of the "
        "batches run, and with static shapes each distinct shape is one graph).",
        "",
        "| pad_to_multiple_of | dynamic | distinct shapes (all batches) | batches run | distinct shapes in them | "
        "graphs compiled | graph breaks | target padding | seconds (compile included) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['pad_to_multiple_of'] or '-'} | {r['dynamic']} | {r['distinct_shapes']} | "
            f"{r['batches_run']} | {r['distinct_shapes_in_batches_run']} | {r['graphs_compiled']} | "
            f"{r['graph_breaks']} | {r['target_padding_share']:.1%} | {r['seconds']} |"
        )
    (args.out / "recompiles.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
