"""Helpers shared by the tests of vaswani_hf.data (corpora, preprocessing, batching) and of the trainer.

Only synthetic sentences written for these tests are used; Multi30k is read from ../shared (or
$VASWANI_MULTI30K_DIR) when present and never copied into the repository.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import numpy as np

MULTI30K_RAW = Path(
    os.environ.get(
        "VASWANI_MULTI30K_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k" / "raw"
    )
)


def synthetic_pairs(n: int = 200, seed: int = 0) -> tuple[list[str], list[str]]:
    """Template EN-DE sentences written for these tests (not from any corpus)."""
    subj = [
        ("The cat", "Die Katze"),
        ("A tall man", "Ein großer Mann"),
        ("My sister", "Meine Schwester"),
        ("The children", "Die Kinder"),
        ("Nobody", "Niemand"),
    ]
    verb = [("sees", "sieht"), ("paints", "malt"), ("carries", "trägt"), ("wants", "will")]
    obj = [
        ("a ball", "einen Ball"),
        ("the blue door", "die blaue Tür"),
        ("two apples", "zwei Äpfel"),
        ("an umbrella", "einen Regenschirm"),
        ("the heavy box on the stairs", "die schwere Kiste auf der Treppe"),
    ]
    tail = [(".", "."), ("!", "!"), (" again.", " schon wieder."), (' "now".', " \u201ejetzt\u201c.")]
    combos = list(itertools.product(subj, verb, obj, tail))
    random.Random(seed).shuffle(combos)
    combos = (combos * (n // len(combos) + 1))[:n]
    return [f"{s[0]} {v[0]} {o[0]}{t[0]}" for s, v, o, t in combos], [
        f"{s[1]} {v[1]} {o[1]}{t[1]}" for s, v, o, t in combos
    ]


def write_text(path: Path, lines: list[str]) -> Path:
    """One line per item, each ending in "\\n" (UTF-8)."""
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return path


def random_lengths(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source and target token counts of a made-up corpus (targets 0.7-1.5 x the source)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 80, size=n)
    tgt = np.clip((src * rng.uniform(0.7, 1.5, size=n)).astype(int), 2, 120)
    return src, tgt


def padded(batch, lengths) -> int:
    """Padded tokens of a batch: sentences x longest."""
    return len(batch) * max(lengths[i] for i in batch)
