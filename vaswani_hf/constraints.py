"""Build command-line flags from the declared settings, so that a flag takes the values, the default and the meaning of
the setting it sets.

Every rule about a value is declared once, beside what it configures, as a dataclass field with its metadata
(`vaswani_hf.settings`): the model's settings are `VaswaniConfig`'s fields, the decoding settings those of
`DecodingSettings`, a recipe's keys the fields of its sections (`vaswani_hf.training.recipe`), and each tool's own
options the fields of its options class. Every flag that has a range or choices sets such a declared `Setting`, and
`flag(setting)` gives its `add_argument` keywords: its checked argparse type or its choices, its default, and its
meaning and range as help. So a flag cannot disagree with the setting it sets, and a bad value is one line naming its
flag before any work: no value reaches torch or transformers unchecked. `device` checks a torch device in the same way,
against what this machine has.

Upper bounds exist where a huge value would exhaust memory or overflow a library's integer rather than fail with a
message (a seed beyond 2^32, a beam of a million hypotheses); they are far above any real use.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from .configuration_vaswani import MAX_POSITIONS, SettingError
from .settings import Setting, settings_of

MAX_SEED = 2**32 - 1  # numpy's and Python's seeding accept 0 .. 2^32 - 1
MAX_SENTENCES = 10**7  # the upper bound of batch sizes and of counts of sentences
MAX_TOKENS = 10**9  # the upper bound of token budgets


def flag_type(setting: Setting, none: str | None = None):
    """Return the argparse type of a flag that sets `setting`, which reads and checks the flag's text.

    When `none` is given (for example "none"), a user who types that word as the flag's value gets None. A bad value
    raises argparse.ArgumentTypeError, so argparse's error names the flag, as in "argument --num_beams: must be in
    [1, 8], got 0".
    """
    words = (none,) if none else ()

    def convert(text: str):
        try:
            return setting.parse(text, "", none=words)
        except SettingError as error:
            raise argparse.ArgumentTypeError(error.phrase) from None

    convert.__name__ = setting.type.__name__
    convert.setting = setting
    return convert


_UNSET = object()


def flag(setting: Setting, *, none: str | None = None, default=_UNSET, **keywords) -> dict:
    """Return the `add_argument` keywords of the flag that sets the declared `setting`: its choices, or its checked
    argparse type (`flag_type`), its meaning and range as help, and its declared default. `default` gives another
    default where the tool has one of its own, e.g. None for "the model's generation_config"; `--help` shows it.
    `none` names a word that the user may type to mean None, such as "none" for `--max_length_b none`: it is added to
    the choices, or the type turns it into None. `keywords` are passed to argparse as they are (metavar, or
    type=str.upper to apply before the choices are checked)."""
    limits = setting.limits() if setting.type in (int, float) else ""
    derived = {
        "help": setting.help + (f" [{limits}]" if limits else ""),
        "default": setting.default if default is _UNSET else default,
    }
    if setting.choices:
        derived["choices"] = (*setting.choices, none) if none else setting.choices
    else:
        derived["type"] = flag_type(setting, none)
    return {**derived, **keywords}


@dataclass
class _Counts:
    count: int = field(default=1, metadata={"help": "a whole number >= 1", "min": 1})


# positive_int is the argparse type of a whole number >= 1, for scripts outside the tools (benchmarks) that declare
# nothing else.
positive_int = flag_type(settings_of(_Counts)["count"])


def device(text: str):
    """Check a `--device` value as an argparse type, before anything is loaded, and return it. It must be a torch
    device this machine has: cpu; cuda, or cuda:N with N below the GPU count; or mps where it is available."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def device_problem(text: str) -> str | None:
    """Return why the torch device `text` cannot be used on this machine, or None if it can be."""
    import torch  # imported only when a device is checked, so that `--help` and a refused flag stay fast

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
    "flag",
    "flag_type",
    "positive_int",
    "device",
    "device_problem",
    "MAX_SEED",
    "MAX_SENTENCES",
    "MAX_TOKENS",
    "MAX_POSITIONS",
]
