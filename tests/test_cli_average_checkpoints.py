"""The command-line contract of `vaswani-average-checkpoints` (vaswani_hf.cli.average_checkpoints), for every input
class that applies to it: a missing or empty run folder, missing, corrupt or mismatched checkpoints, an --out that
exists, is a file or holds the checkpoints being averaged, a bad --last, Ctrl-C. What each case asserts, and the shared
assets: cli_contract.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import Assets, Call, Cases, copy, earlier_output, run_case, write
from cli_helpers import truncate

from vaswani_hf.io import check_safetensors

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

case = Cases("average_checkpoints")


def run_copy(t: Path, a: Assets) -> Path:
    """The checkpoints of the shared run, in the case's folder."""
    for step in (2, 4):
        copy(a.run / f"checkpoint-{step}", t / "run" / f"checkpoint-{step}")
    return t / "run"


@case("run-dir-missing")
def _(t, a):
    return Call(["--run_dir", t / "absent", "--out", t / "avg"], 2, ("--run_dir", str(t / "absent"), "not found"))


@case("run-dir-is-a-file")
def _(t, a):
    return Call(["--run_dir", write(t / "run", "x"), "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "is a file"))


@case("run-dir-without-checkpoints")
def _(t, a):
    write(t / "run" / "notes.txt", "x")
    return Call(["--run_dir", t / "run", "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "no checkpoint"))


@case("checkpoint-missing")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", run / "checkpoint-2", run / "checkpoint-3", "--out", t / "avg"], 2,
                (str(run / "checkpoint-3"), "not found"))


@case("checkpoint-is-a-file")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", run / "checkpoint-2", write(run / "checkpoint-3", "x"), "--out", t / "avg"], 2,
                (str(run / "checkpoint-3"),))


@case("truncated-safetensors")
def _(t, a):
    run = run_copy(t, a)
    truncate(run / "checkpoint-4" / "model.safetensors")
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4" / "model.safetensors"), "truncated or corrupt"))


@case("invalid-config-json")
def _(t, a):
    run = run_copy(t, a)
    write(run / "checkpoint-4" / "config.json", "{not json")
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4" / "config.json") + ":1: invalid JSON",))


@case("different-architectures")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--checkpoints", a.model, run / "checkpoint-4", "--out", t / "avg"], 2,
                (str(run / "checkpoint-4"), "other tensors"))


@case("out-exists")
def _(t, a):
    run = run_copy(t, a)
    write(t / "avg" / "mine.txt", "keep")
    return Call(["--run_dir", run, "--out", t / "avg"], 2, ("--out", str(t / "avg"), "not empty", "--overwrite"))


@case("out-exists-overwrite")
def _(t, a):
    from vaswani_hf.training.checkpoints import AVERAGED

    run = run_copy(t, a)
    earlier_output(t / "avg", AVERAGED)

    def check(stdout, stderr):
        assert not (t / "avg" / "mine.txt").exists()
        check_safetensors(t / "avg" / "model.safetensors")
        assert json.loads((t / "avg" / "averaged_from.json").read_text()) == ["checkpoint-2", "checkpoint-4"]
    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg", "--overwrite"], 0, may_change=(t / "avg",),
                check=check)


@case("out-is-the-run-dir")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run], 2, ("--out", str(run)))


@case("out-is-the-run-dir-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run, "--overwrite"], 2,
                ("--out", str(run), "contains --run_dir's checkpoint-2", "which this command reads"))


@case("out-foreign-overwrite")
def _(t, a):
    run = run_copy(t, a)
    write(t / "avg" / "mine.txt", "precious")
    return Call(["--run_dir", run, "--out", t / "avg", "--overwrite"], 2,
                ("--out", str(t / "avg"), "not an earlier averaged model folder", "mine.txt"))


@case("out-is-a-checkpoint-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run / "checkpoint-4", "--overwrite"], 2,
                ("--out", str(run / "checkpoint-4"), "is --run_dir's checkpoint-4"))


@case("out-is-a-file")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", write(t / "avg", "x")], 2, ("--out", str(t / "avg"), "is a file"))


@case("last-0")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "0", "--out", t / "avg"], 2, ("--last", "0"))


@case("last-negative")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "-1", "--out", t / "avg"], 2, ("--last", "-1"))


@case("ctrl-c")
def _(t, a):
    return Call(["--run_dir", run_copy(t, a), "--last", "2", "--out", t / "avg"], 130, ("interrupted",),
                interrupt="safetensors.torch.save_file")  # inside the atomically written folder


@pytest.mark.parametrize("tool, build", case.params)
def test_cli_contract(tool, build, tmp_path, assets, capfd, monkeypatch):
    run_case(tool, build, tmp_path, assets, capfd, monkeypatch)
