#!/usr/bin/env python
"""A deterministic synthetic parallel corpus of WMT14's shape, written locally for the scale rehearsal.

Not real language and not WMT data (which this project cannot download): what matters for the pipeline's time and
memory is reproduced instead. Each side has its own vocabulary of 100,000 word types made of syllables (frequent words
short, rare ones long, ~5 letters a word on average, so that a BPE of 37k merges has realistic work), drawn with Zipf frequencies (rank^-1.07, close
to English news text); sentence lengths are log-normal with a mean of ~27 words and a long tail up to 250 words
(WMT14 EN-DE train after the usual cleaning has a mean of ~23-27 words and a maximum of a few hundred); the target
length is the source length times ~1.05 with noise. Line i of the target depends on line i of the source (word
ranks are shared), so a model could in principle learn something.

    python benchmarks/synthetic_wmt.py --pairs 500000 --out /tmp/wmt-synth-0.5M     # train/valid/test .en/.de

The corpus is written by the benchmark at run time and never committed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

TYPES = 100_000
MEAN_WORDS = 27.0
MAX_WORDS = 250
CHUNK = 50_000  # sentences generated and written at a time (bounded memory at any corpus size)
ONSETS = [
    "",
    "b",
    "br",
    "ch",
    "d",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kl",
    "l",
    "m",
    "n",
    "p",
    "pr",
    "r",
    "s",
    "sch",
    "sp",
    "st",
    "t",
    "tr",
    "v",
    "w",
    "z",
]
NUCLEI = ["a", "e", "i", "o", "u", "au", "ei", "ie", "ea", "ou", "ä", "ö", "ü"]
CODAS = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck", "nd", "st"]


def vocabulary(seed: int, types: int = TYPES) -> np.ndarray:
    """`types` distinct words, rank 0 the most frequent; word length grows with rank (1-3 syllables)."""
    rng = np.random.default_rng(seed)
    words, seen = [], set()
    while len(words) < types:
        rank = len(words)
        syllables = 1 + (rank >= 1_000) + (rank >= 20_000)  # ~5 letters a word on average, as in English text
        word = "".join(
            ONSETS[rng.integers(len(ONSETS))] + NUCLEI[rng.integers(len(NUCLEI))] + CODAS[rng.integers(len(CODAS))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return np.array(words, dtype=object)


def sentence_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """Log-normal word counts with mean ~MEAN_WORDS, clipped to [1, MAX_WORDS]."""
    sigma = 0.55
    mu = np.log(MEAN_WORDS) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, MAX_WORDS).astype(np.int64)


def write_split(folder: Path, name: str, pairs: int, seed: int, words: dict[str, np.ndarray]) -> None:
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, len(words["en"]) + 1) ** 1.07
    cumulative = np.cumsum(zipf / zipf.sum())
    with (
        open(folder / f"{name}.en", "w", encoding="utf-8") as en,
        open(folder / f"{name}.de", "w", encoding="utf-8") as de,
    ):
        for start in range(0, pairs, CHUNK):
            n = min(CHUNK, pairs - start)
            src_len = sentence_lengths(rng, n)
            tgt_len = np.clip(np.rint(src_len * rng.normal(1.05, 0.12, n)), 1, MAX_WORDS).astype(np.int64)
            src_ranks = np.searchsorted(cumulative, rng.random(int(src_len.sum())))
            tgt_ranks = np.searchsorted(cumulative, rng.random(int(tgt_len.sum())))
            src_start = np.concatenate([[0], np.cumsum(src_len)])
            tgt_start = np.concatenate([[0], np.cumsum(tgt_len)])
            for i in range(n):
                s = src_ranks[src_start[i] : src_start[i + 1]]
                t = tgt_ranks[tgt_start[i] : tgt_start[i + 1]]
                shared = min(len(s), len(t))
                t[:shared] = s[:shared]  # line i of .de depends on line i of .en: the same word ranks
                en.write(" ".join(words["en"][s]) + ".\n")
                de.write(" ".join(words["de"][t]) + ".\n")


def write_corpus(folder: str | Path, pairs: int, *, seed: int = 0, held_out: int = 3000, types: int = TYPES) -> Path:
    """train (`pairs` lines), valid and test (`held_out` lines each) as Moses files `{split}.{en,de}` in `folder`.
    `types`: word types per side (fewer only for tiny smoke-test corpora, which need no 100k-word vocabulary)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    words = {"en": vocabulary(seed, types), "de": vocabulary(seed + 1, types)}
    for offset, (name, n) in enumerate((("train", pairs), ("valid", held_out), ("test", held_out))):
        write_split(folder, name, n, seed + 10 + offset, words)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, required=True, help="training sentence pairs")
    parser.add_argument("--held_out", type=int, default=3000, help="valid and test sentence pairs each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="folder for {train,valid,test}.{en,de}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    write_corpus(args.out, args.pairs, seed=args.seed, held_out=args.held_out)
    print(f"wrote {args.pairs:,} training pairs to {args.out} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
