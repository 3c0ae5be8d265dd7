"""What a value may be (vaswani_hf.constraints): one vocabulary for command-line flags and recipe keys. A value out of
range is refused naming its flag, before any work."""

from __future__ import annotations

import argparse
import math
import re

import pytest

from vaswani_hf.constraints import Bound, device, device_problem, number


@pytest.mark.parametrize("bound, good, bad", [
    (Bound(0, 1, max_exclusive=True), [0, 0.5, 0.999], [-0.1, 1, 1.5, math.nan, math.inf, -math.inf]),
    (Bound(0, min_exclusive=True), [1e-12, 5, 10**30], [0, -1, math.nan, math.inf]),
    (Bound(None, 10), [-(10**9), 10], [11, math.nan]),
    (Bound(), [0, -5, 1e300], [math.nan, math.inf]),
])
def test_a_bound_refuses_non_finite_and_out_of_range_values(bound, good, bad):
    for value in good:
        assert bound.problem(value) is None, value
    for value in bad:
        assert bound.problem(value), value


def test_describe_reads_as_a_range():
    assert Bound(0, 1, max_exclusive=True).describe() == "in [0, 1)"
    assert Bound(1, 10**6).describe() == "in [1, 1,000,000]"
    assert Bound(0, min_exclusive=True).describe() == "> 0"


def test_a_flag_type_names_the_problem_and_argparse_names_the_flag():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--num_beams", type=number(int, min=1, max=8))
    parser.add_argument("--max_length_b", type=number(int, min=0, none="none"))
    parser.add_argument("--alpha", type=number(float, min=-10, max=10))
    assert parser.parse_args(["--num_beams", "4", "--max_length_b", "none", "--alpha", "0.6"]) == \
        argparse.Namespace(num_beams=4, max_length_b=None, alpha=0.6)
    for argv, message in ((["--num_beams", "0"], "argument --num_beams: must be in [1, 8], got 0"),
                          (["--num_beams", "1e3"], "argument --num_beams: expected an integer, got '1e3'"),
                          (["--num_beams", "99999999999999999999"], "must be in [1, 8]"),
                          (["--max_length_b", "-5"], "argument --max_length_b: must be >= 0, got -5"),
                          (["--max_length_b", "x"], "expected an integer or 'none', got 'x'"),
                          (["--alpha", "nan"], "argument --alpha: must be a finite number"),
                          (["--alpha", "inf"], "must be a finite number")):
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
