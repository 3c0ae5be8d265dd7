"""What values a setting may take: one vocabulary for the model's and decoding's settings, recipe keys and flags.

The model's and decoding's settings are declared once, beside what they configure, in the files that go to the Hub
(`configuration_vaswani.MODEL_SETTINGS`, `generation_vaswani.GENERATION_SETTINGS`: `Setting`s with a type, a default,
a meaning and a `Bound`); those files check every value that reaches them (`VaswaniConfig(...)`, config.json,
generation_config.json, `generate()`). Here they become command-line flags (`setting_flag`), as the recipe's model
keys become recipe keys (`vaswani_hf.training.recipe`), so a flag cannot disagree with the setting it sets.

A `Bound` says what a number must satisfy: finite (NaN and infinity are refused everywhere), a lowest and a highest
value, each inclusive or exclusive. The other recipe keys declare theirs in `vaswani_hf.training.recipe`
(`key(default, help, min=1)`), and every other flag declares its own as an argparse type (`number(int, min=1)`,
`device`), so a value is checked where it is declared and before any work: no value reaches torch or transformers
unchecked.

Upper bounds exist where a huge value would exhaust memory or overflow a library's integer (a seed beyond 2^32,
a beam of a million hypotheses) rather than fail with a message; they are far above any real use.
"""

from __future__ import annotations

import argparse

from .configuration_vaswani import MAX_POSITIONS, Bound, Setting
from .generation_vaswani import MAX_BEAMS

MAX_SEED = 2**32 - 1  # numpy's and Python's seeding accept 0 .. 2^32 - 1
MAX_SENTENCES = 10**7  # batch sizes, counts of sentences
MAX_TOKENS = 10**9  # token budgets


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


def setting_flag(setting: Setting, *, none: str | None = None) -> dict:
    """`add_argument` keywords of the flag that sets a declared `Setting`: its choices, or an argparse type with its
    kind and bound (`number`), and its meaning as help. `none`: a word that gives None."""
    if setting.choices:
        return {"choices": setting.choices, "help": setting.help}
    b = setting.bound
    return {"type": number(setting.type, min=b.min, max=b.max, min_exclusive=b.min_exclusive,
                           max_exclusive=b.max_exclusive, none=none), "help": setting.help}


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


__all__ = ["Bound", "Setting", "UNIT", "number", "positive_int", "setting_flag", "device", "device_problem",
           "MAX_SEED", "MAX_BEAMS", "MAX_SENTENCES", "MAX_TOKENS", "MAX_POSITIONS"]
