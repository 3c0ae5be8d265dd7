"""What a value may be (`Setting`, and the flags vaswani_hf.settings derives from it): one form -- a dataclass field
and its metadata -- for command-line flags, recipe keys, file fields and environment variables. A value out of range
is refused naming its flag, before any work; a narrower view of a setting allows only values the setting allows."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

import pytest

from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.settings import GENERATION_SETTINGS, device, device_problem, flag, flag_type, settings_of


def declared(kind, name: str = "x", **metadata):
    """The `Setting` of one dataclass field of type `kind` with this metadata: the one form of a declaration."""
    fields = [(name, kind, dataclasses.field(default=None, metadata={"help": f"the {name}", **metadata}))]
    return settings_of(dataclasses.make_dataclass("One", fields))[name]


@pytest.mark.parametrize(
    "limits, good, bad",
    [
        (dict(min=0, max=1, max_exclusive=True), [0, 0.5, 0.999], [-0.1, 1, 1.5, math.nan, math.inf, -math.inf]),
        (dict(min=0, min_exclusive=True), [1e-12, 5, 10**30], [0, -1, math.nan, math.inf]),
        (dict(max=10), [-(10**9), 10], [11, math.nan]),
        ({}, [0, -5, 1e300], [math.nan, math.inf]),
    ],
)
def test_a_setting_refuses_non_finite_and_out_of_range_values(limits, good, bad):
    setting = declared(float, **limits)
    for value in good:
        assert setting.problem(value) is None, value
    for value in bad:
        assert setting.problem(value), value
        with pytest.raises(SettingError, match=r"^here: x must be "):
            setting.check(value, "here")


def test_the_range_reads_as_a_range():
    assert declared(float, min=0, max=1, max_exclusive=True).limits() == "in [0, 1)"
    assert declared(int, min=1, max=10**6).limits() == "in [1, 1,000,000]"
    assert declared(float, min=0, min_exclusive=True).limits() == "> 0"
    assert declared(int | str, min=1, words=("auto",)).describe() == "an integer >= 1 or 'auto'"


def test_text_is_read_by_the_declaration():
    """One reader of text for flags, recipe keys and environment variables: numbers, words, booleans, None."""
    count = declared(int | str | None, "n", min=1, max=8, words=("auto",))
    assert [count.parse(t, "w", none=("none",)) for t in ("4", " 8\n", "auto", "None")] == [4, 8, "auto", None]
    for text in ("0", "1.5", "1e3", "x", "", "nan"):
        with pytest.raises(SettingError, match=r"^w: n must be "):
            count.parse(text, "w")
    switch = declared(bool, "b")
    assert [switch.parse(t, "w") for t in ("true", "No", "1", "off")] == [True, False, True, False]
    with pytest.raises(SettingError, match="b must be a boolean, got 'maybe'"):
        switch.parse("maybe", "w")


def test_a_narrower_view_allows_only_what_the_setting_allows():
    beams = GENERATION_SETTINGS["num_beams"]
    few = beams.narrowed(max=12)
    assert (few.name, few.min, few.max, few.help) == (beams.name, 1, 12, beams.help)
    assert few.problem(12) is None and few.problem(13) and beams.problem(13) is None
    for wider in (dict(max=beams.max + 1), dict(min=0), dict(max=None), dict(default=0), dict(name="other")):
        with pytest.raises(ValueError, match="does not narrow"):
            beams.narrowed(**wider)
    penalty = GENERATION_SETTINGS["length_penalty_type"]
    assert penalty.narrowed(choices=("gnmt",)).problem("hf")
    with pytest.raises(ValueError):
        penalty.narrowed(choices=("gnmt", "wu"))


def test_a_flag_type_names_the_problem_and_argparse_names_the_flag():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--num_beams", type=flag_type(declared(int, min=1, max=8)))
    parser.add_argument("--max_length_b", type=flag_type(declared(int | None, min=0), none="none"))
    parser.add_argument("--alpha", type=flag_type(declared(float, min=-10, max=10)))
    assert parser.parse_args(["--num_beams", "4", "--max_length_b", "none", "--alpha", "0.6"]) == argparse.Namespace(
        num_beams=4, max_length_b=None, alpha=0.6
    )
    for argv, message in (
        (["--num_beams", "0"], "argument --num_beams: must be in [1, 8], got 0"),
        (["--num_beams", "1e3"], "argument --num_beams: must be an integer in [1, 8], got 1000.0"),
        (["--num_beams", "99999999999999999999"], "must be in [1, 8]"),
        (["--max_length_b", "-5"], "argument --max_length_b: must be >= 0, got -5"),
        (["--max_length_b", "x"], "must be an integer >= 0 or 'none', got 'x'"),
        (["--alpha", "nan"], "argument --alpha: must be a finite number"),
        (["--alpha", "inf"], "must be a finite number"),
    ):
        with pytest.raises(argparse.ArgumentError, match=re.escape(message)):
            parser.parse_args(argv)


def test_devices_this_machine_does_not_have_are_refused(monkeypatch):
    import torch

    assert device("cpu") == "cpu" and device_problem("cpu") is None
    assert "is not a torch device" in device_problem("gpu0")
    assert "not supported" in device_problem("meta")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "this machine has no CUDA GPU" in device_problem("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert device_problem("cuda:0") is None and "has 1 CUDA GPU(s)" in device_problem("cuda:3")
    with pytest.raises(argparse.ArgumentTypeError):
        device("cuda:3")


def test_a_flag_derives_its_choices_range_default_and_help_from_the_declaration():
    """`flag(setting)`: the one way a tool writes a flag with a range or choices; `--help` shows the range and the
    default."""
    beams = GENERATION_SETTINGS["num_beams"]
    derived = flag(beams)
    assert derived["type"].setting is beams and derived["default"] == beams.default
    assert derived["help"] == f"{beams.help} [in [1, 1024]]"  # its meaning and its range
    penalty = flag(GENERATION_SETTINGS["length_penalty_type"], default=None)
    assert penalty["choices"] == ("gnmt", "hf") and penalty["default"] is None and "type" not in penalty
    assert flag(declared(str, choices=("a", "b")), none="none")["choices"] == ("a", "b", "none")
