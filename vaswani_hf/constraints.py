"""What values a setting may take, declared next to the setting: one vocabulary for recipe keys and command-line flags.

A `Bound` says what a number must satisfy: finite (NaN and infinity are refused everywhere), a lowest and a highest
value, each inclusive or exclusive. Recipe keys declare theirs in `vaswani_hf.training.recipe` (`key(default, help,
min=1)`), and every flag of every command declares its own as an argparse type (`number(int, min=1)`, `device`), so
a value is checked where it is declared and before any work: no value reaches torch or transformers unchecked.

Upper bounds exist where a huge value would exhaust memory or overflow a library's integer (a seed beyond 2^32,
a beam of a million hypotheses) rather than fail with a message; they are far above any real use.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

MAX_SEED = 2**32 - 1  # numpy's and Python's seeding accept 0 .. 2^32 - 1
MAX_BEAMS = 1024
MAX_SENTENCES = 10**7  # batch sizes, counts of sentences
MAX_TOKENS = 10**9  # token budgets
MAX_POSITIONS = 65536  # rows of a position table (each row is d_model floats)


@dataclass(frozen=True)
class Bound:
    """A numeric constraint: `min <= value` (or `min < value` with `min_exclusive`), `value <= max` (or `<` with
    `max_exclusive`), and always finite."""

    min: float | None = None
    max: float | None = None
    min_exclusive: bool = False
    max_exclusive: bool = False

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks this bound (a phrase to follow "must ..."), or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None  # types are checked by the caller
        if isinstance(value, float) and not math.isfinite(value):
            return f"be a finite number ({self.describe()})"
        low = self.min is not None and (value <= self.min if self.min_exclusive else value < self.min)
        high = self.max is not None and (value >= self.max if self.max_exclusive else value > self.max)
        return f"be {self.describe()}" if low or high else None

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return f"in {'(' if self.min_exclusive else '['}{_num(self.min)}, {_num(self.max)}" \
                   f"{')' if self.max_exclusive else ']'}"
        if self.min is not None:
            return f"{'>' if self.min_exclusive else '>='} {_num(self.min)}"
        if self.max is not None:
            return f"{'<' if self.max_exclusive else '<='} {_num(self.max)}"
        return "finite"


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) and abs(x) >= 10**4 else f"{x:g}" if isinstance(x, float) else str(x)


UNIT = Bound(0.0, 1.0, max_exclusive=True)  # a probability that must leave something: dropout, smoothing, beta


def number(kind: type = int, *, min: float | None = None, max: float | None = None, min_exclusive: bool = False,
           max_exclusive: bool = False, none: str | None = None):
    """An argparse type for a number of `kind` (int or float) within the bound; `none` names a word (e.g. "none")
    that gives None. The error argparse reports names the flag: "argument --num_beams: must be >= 1, got 0"."""
    bound = Bound(min, max, min_exclusive, max_exclusive)

    def convert(text: str):
        if none is not None and text.lower() == none:
            return None
        try:
            value = kind(text)
        except ValueError:
            alternative = f" or {none!r}" if none else ""
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}"
                                              f"{alternative}, got {text!r}") from None
        problem = bound.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"must {problem}, got {text}")
        return value

    convert.__name__ = kind.__name__
    convert.bound = bound
    return convert


positive_int = number(int, min=1)


def device(text: str):
    """An argparse type for `--device`: a torch device this machine has (cpu; cuda / cuda:N with N below the GPU
    count; mps where available), checked before anything is loaded."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def device_problem(text: str) -> str | None:
    """Why the torch device `text` cannot be used on this machine, or None."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        return f"{text!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)"
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return f"{text!r}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use cpu"
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            return f"{text!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0"
        return None
    if dev.type == "mps":
        return None if torch.backends.mps.is_available() else f"{text!r}: MPS is not available on this machine"
    return f"{text!r}: device type {dev.type} is not supported here (use cpu, cuda or mps)"


__all__ = ["Bound", "UNIT", "number", "positive_int", "device", "device_problem", "MAX_SEED", "MAX_BEAMS",
           "MAX_SENTENCES", "MAX_TOKENS", "MAX_POSITIONS"]
