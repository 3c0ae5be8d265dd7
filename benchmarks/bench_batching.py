#!/usr/bin/env python
"""Benchmark (not a test): padding efficiency of token-based batching on Multi30k train (paper, Section 5.1),
plus BPE training time and tokenization throughput.

Padding efficiency = non-pad tokens / all tokens of the padded [batch, seq] tensors, source and target together
(also reported per side).  Compared, at the same average number of sentences per batch:
  * token:  vaswani_hf.data.batching.TokenBatchSampler (max_tokens budget, padded source and target each <= budget);
  * random: torch RandomSampler + BatchSampler, what Trainer does by default (train_sampling_strategy="random");
  * group_by_length: transformers.trainer_pt_utils.LengthGroupedSampler, the sampler Trainer builds for
    train_sampling_strategy="group_by_length" (Trainer._get_train_sampler), lengths = source input_ids lengths.

Usage: python benchmarks/bench_batching.py [--multi30k DIR] [--vocab_size 8000]
Writes benchmarks/results/batching.json and benchmarks/results/batching.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler
from transformers.trainer_pt_utils import LengthGroupedSampler

from vaswani_hf.data.batching import TokenBatchSampler
from vaswani_hf.data.corpora import load_corpus
from vaswani_hf.data.preprocessing import prepare_dataset, sequence_lengths, tokenize_pairs
from vaswani_hf.tokenization import train_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_M30K = Path(os.environ.get("VASWANI_MULTI30K_DIR", ROOT.parent / "shared" / "data" / "multi30k" / "raw"))


def efficiency(batches: list[list[int]], src: np.ndarray, tgt: np.ndarray) -> dict[str, float]:
    real_s = real_t = pad_s = pad_t = 0
    for b in batches:
        s, t = src[b], tgt[b]
        real_s += int(s.sum())
        real_t += int(t.sum())
        pad_s += len(b) * int(s.max())
        pad_t += len(b) * int(t.max())
    return {
        "efficiency": (real_s + real_t) / (pad_s + pad_t),
        "src_efficiency": real_s / pad_s,
        "tgt_efficiency": real_t / pad_t,
        "num_batches": len(batches),
        "mean_sentences_per_batch": float(np.mean([len(b) for b in batches])),
        "max_padded_src_tokens": int(max(len(b) * src[b].max() for b in batches)),
        "max_padded_tgt_tokens": int(max(len(b) * tgt[b].max() for b in batches)),
    }


def mean_over_epochs(make_batches, epochs: int) -> dict[str, float]:
    runs = [make_batches(e) for e in range(epochs)]
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--multi30k", type=Path, default=DEFAULT_M30K)
    ap.add_argument("--vocab_size", type=int, default=8000)
    ap.add_argument("--max_tokens", type=int, nargs="+", default=[2048, 4096, 25000])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)

    files = [args.multi30k / "train.en", args.multi30k / "train.de"]
    t0 = time.perf_counter()
    tok = train_bpe_tokenizer(files, vocab_size=args.vocab_size, show_progress=False)
    train_seconds = time.perf_counter() - t0

    raw = load_corpus("moses", args.multi30k / "train", "en", "de")
    throughput = {}
    for num_proc in (None, 2):
        t0 = time.perf_counter()
        tokenize_pairs(raw, tok, "en", "de", num_proc=num_proc, load_from_cache_file=False)
        throughput[f"num_proc={num_proc or 1}"] = len(raw) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    pairs = raw["translation"]
    enc = tok.backend_tokenizer.encode_batch([p["en"] for p in pairs] + [p["de"] for p in pairs])
    throughput["raw tokenizers.encode_batch (no datasets)"] = len(raw) / (time.perf_counter() - t0)
    del enc

    data, report = prepare_dataset(raw, tok, "en", "de")
    src, tgt = sequence_lengths(data, "input_ids"), sequence_lengths(data, "labels")
    n = len(src)

    results = []
    for max_tokens in args.max_tokens:
        sampler = TokenBatchSampler(src, tgt, max_tokens, seed=0)

        def token_batches(epoch, s=sampler):
            s.set_epoch(epoch)
            return efficiency(list(s), src, tgt)

        token = mean_over_epochs(token_batches, args.epochs)
        bsz = max(1, round(token["mean_sentences_per_batch"]))

        def random_batches(epoch):
            g = torch.Generator().manual_seed(epoch)
            return efficiency(list(BatchSampler(RandomSampler(range(n), generator=g), bsz, drop_last=False)), src, tgt)

        def grouped_batches(epoch):
            g = torch.Generator().manual_seed(epoch)
            order = list(LengthGroupedSampler(bsz, lengths=src.tolist(), generator=g))
            return efficiency([order[i : i + bsz] for i in range(0, n, bsz)], src, tgt)

        results.append(
            {
                "max_tokens": max_tokens,
                "batch_size_for_baselines": bsz,
                "token_based": token,
                "random": mean_over_epochs(random_batches, args.epochs),
                "group_by_length": mean_over_epochs(grouped_batches, args.epochs),
            }
        )

    out = {
        "corpus": "Multi30k train (en-de), raw",
        "pairs": n,
        "filter_report": report.as_dict(),
        "vocab_size": len(tok),
        "tokenizer_train_seconds": train_seconds,
        "tokenize_pairs_per_second": throughput,
        "mean_src_tokens": float(src.mean()),
        "mean_tgt_tokens": float(tgt.mean()),
        "padding_efficiency": results,
        "epochs_averaged": args.epochs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batching.json").write_text(json.dumps(out, indent=2) + "\n")

    lines = [
        "# Token-based batching: padding efficiency on Multi30k train (en-de)",
        "",
        f"{n} pairs, shared byte-level BPE of {len(tok)} tokens (mean {src.mean():.1f} source / {tgt.mean():.1f} "
        f"target tokens per sentence, `</s>` included). Efficiency = non-pad tokens / all tokens in the padded "
        f"source and target tensors, mean over {args.epochs} epochs. Baselines use the token sampler's mean "
        "sentences per batch as their fixed batch size.",
        "",
        "| max_tokens | sentences/batch | token-based | random | group_by_length | token max padded src/tgt |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        t = r["token_based"]
        lines.append(
            f"| {r['max_tokens']} | {t['mean_sentences_per_batch']:.1f} | {t['efficiency']:.3f} | "
            f"{r['random']['efficiency']:.3f} | {r['group_by_length']['efficiency']:.3f} | "
            f"{t['max_padded_src_tokens']:.0f} / {t['max_padded_tgt_tokens']:.0f} |"
        )
    lines += [
        "",
        f"Tokenizer training (train.en + train.de, vocab {args.vocab_size}): {train_seconds:.2f} s.",
        "",
        "Tokenization throughput (pairs/s, `tokenize_pairs` = `Dataset.map` over the transformers tokenizer): "
        + ", ".join(f"{k}: {v:,.0f}" for k, v in throughput.items())
        + ".",
        "",
        f"Machine: {os.cpu_count()} CPU cores, torch {torch.__version__}. Produced by `benchmarks/bench_batching.py`.",
    ]
    (args.out / "batching.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
