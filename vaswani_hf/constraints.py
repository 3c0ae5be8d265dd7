"""Command-line flags from declarations: every flag's value is a `Setting` (configuration_vaswani), so a flag cannot
disagree with the setting it sets (`setting_flag`); a tool's own flag declares its setting in place (`number(int,
min=1)`), and `device` checks a torch device: no value reaches torch or transformers unchecked. Upper bounds exist
where a huge value would exhaust memory or overflow a library's integer; they are far above any real use.
"""

from __future__ import annotations

import argparse

from .configuration_vaswani import MAX_POSITIONS, Setting, SettingError

MAX_SEED = 2**32 - 1  # numpy's and Python's seeding accept 0 .. 2^32 - 1
MAX_SENTENCES = 10**7  # batch sizes, counts of sentences
MAX_TOKENS = 10**9  # token budgets


def flag_type(setting: Setting, none: str | None = None):
    """The argparse type of a flag that sets `setting` (`none`: a word that gives None); argparse's error names the
    flag: "argument --num_beams: must be in [1, 8], got 0"."""
    words = (none,) if none else ()

    def convert(text: str):
        try:
            return setting.parse(text, "", none=words)
        except SettingError as error:
            raise argparse.ArgumentTypeError(error.phrase) from None

    convert.__name__ = setting.type.__name__
    convert.setting = setting
    return convert


def number(kind: type = int, *, none: str | None = None, **limits):
    """The argparse type of a tool's own numeric flag: a `Setting` of `kind` (int or float) within `limits` (`min`,
    `max`, `min_exclusive`, `max_exclusive`); `none` names a word (e.g. "none") that gives None."""
    return flag_type(Setting("value", kind, nullable=none is not None, **limits), none)


positive_int = number(int, min=1)


def setting_flag(setting: Setting, *, none: str | None = None) -> dict:
    """`add_argument` keywords of the flag that sets a declared `Setting`: its choices, or its argparse type
    (`flag_type`), and its meaning as help. `none`: a word that gives None."""
    if setting.choices:
        return {"choices": setting.choices, "help": setting.help}
    return {"type": flag_type(setting, none), "help": setting.help}


def device(text: str):
    """An argparse type for `--device`: a torch device this machine has, checked before anything is loaded."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def device_problem(text: str) -> str | None:
    """Why the torch device `text` cannot be used on this machine, or None."""
    import torch  # imported when a device is checked: `--help` and a refused flag stay fast

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


__all__ = [
    "Setting",
    "flag_type",
    "number",
    "positive_int",
    "setting_flag",
    "device",
    "device_problem",
    "MAX_SEED",
    "MAX_SENTENCES",
    "MAX_TOKENS",
    "MAX_POSITIONS",
]
