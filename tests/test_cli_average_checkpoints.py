"""The command-line contract of `vaswani-average-checkpoints` (vaswani_hf.cli.average_checkpoints), for every input
class that applies to it: a missing or empty run folder, missing, corrupt or mismatched checkpoints, an --out that
exists, is a file or holds the checkpoints being averaged, a bad --last, Ctrl-C. What each case asserts, and the shared
assets: cli_contract.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_contract import PAGE, Assets, Call, Cases, PathCase, Writer, copy, earlier_output, write
from cli_helpers import truncate

from vaswani_hf.io import UsageError, check_safetensors

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _checkpoints(f: Path, a: Assets) -> dict[str, Path]:
    return {f"checkpoint-{s}": copy(a.run / f"checkpoint-{s}", f / "run" / f"checkpoint-{s}") for s in (2, 4)}


_ROLES = ("checkpoint-2", "checkpoint-4")
case = Cases(
    "average_checkpoints",
    refused=lambda t: ["--run_dir", t / "absent", "--out", t / "avg"],
    run=lambda a, t: ["--checkpoints", a.run / "checkpoint-2", a.run / "checkpoint-4", "--out", t / "avg"],
    paths=[
        PathCase(
            "average_checkpoints",
            _checkpoints,
            lambda i, o, w: ["--checkpoints", i["checkpoint-2"], i["checkpoint-4"], "--out", o, *["--overwrite"][:w]],
            "--out",
            roles=_ROLES,
        ),
        PathCase(
            "average_checkpoints-run_dir",
            _checkpoints,
            lambda i, o, w: ["--run_dir", i["checkpoint-4"].parent, "--last", "2", "--out", o, *["--overwrite"][:w]],
            "--out",
            roles=_ROLES,
            derived=_ROLES,
        ),
    ],
    writers=[Writer("average_checkpoints", None, "--out", 16 * PAGE)],
)


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
    return Call(
        ["--run_dir", write(t / "run", "x"), "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "is a file")
    )


@case("run-dir-without-checkpoints")
def _(t, a):
    write(t / "run" / "notes.txt", "x")
    return Call(["--run_dir", t / "run", "--out", t / "avg"], 2, ("--run_dir", str(t / "run"), "no checkpoint"))


@case("checkpoint-missing")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", run / "checkpoint-2", run / "checkpoint-3", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-3"), "not found"),
    )


@case("checkpoint-is-a-file")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", run / "checkpoint-2", write(run / "checkpoint-3", "x"), "--out", t / "avg"],
        2,
        (str(run / "checkpoint-3"),),
    )


@case("truncated-safetensors")
def _(t, a):
    run = run_copy(t, a)
    truncate(run / "checkpoint-4" / "model.safetensors")
    return Call(
        ["--run_dir", run, "--last", "2", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4" / "model.safetensors"), "truncated or corrupt"),
    )


@case("invalid-config-json")
def _(t, a):
    run = run_copy(t, a)
    write(run / "checkpoint-4" / "config.json", "{not json")
    return Call(
        ["--run_dir", run, "--last", "2", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4" / "config.json") + ":1: invalid JSON",),
    )


@case("different-architectures")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", a.model, run / "checkpoint-4", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4"), "different architectures", "config.json field"),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Inputs that must agree: one architecture, one tokenizer, each checkpoint once
# ---------------------------------------------------------------------------------------------------------------------


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(change(data) or data), encoding="utf-8")


@pytest.mark.parametrize(
    "field, value",
    [
        ("sinusoid_layout", "concatenated"),
        ("layer_norm_eps", 1e-5),
        ("attention_bias", True),
        ("scale_embedding", False),
    ],
)
def test_checkpoints_of_other_architectures_with_the_same_tensors_are_refused(field, value, tmp_path, assets):
    """Interleaved against concatenated sinusoids (and any other field that changes the function) give tensors of
    the same names and shapes: only config.json tells them apart."""
    from vaswani_hf.io.averaging import check_checkpoints_agree

    run = run_copy(tmp_path, assets)
    edit_json(run / "checkpoint-4" / "config.json", lambda c: c.update({field: value}))
    with pytest.raises(
        UsageError,
        match=rf"checkpoint-4 and .*checkpoint-2 are of different architectures "
        rf"\(config\.json field {field}:",
    ):
        check_checkpoints_agree([run / "checkpoint-2", run / "checkpoint-4"])
    edit_json(run / "checkpoint-4" / "config.json", lambda c: c.update({"dropout": 0.3, "transformers_version": "x"}))
    edit_json(run / "checkpoint-2" / "config.json", lambda c: c.update({field: value}))
    check_checkpoints_agree([run / "checkpoint-2", run / "checkpoint-4"])  # training-only fields may differ


def swap_two_tokens(path: Path) -> None:
    """The same tokenizer size, two tokens' ids exchanged: other ids for the same text."""

    def change(data):
        vocab = data["model"]["vocab"]
        a, b = sorted(vocab, key=vocab.get)[-2:]
        vocab[a], vocab[b] = vocab[b], vocab[a]

    edit_json(path, change)


@case("other-tokenizer-same-size")
def _(t, a):
    run = run_copy(t, a)
    swap_two_tokens(run / "checkpoint-4" / "tokenizer.json")
    return Call(
        ["--run_dir", run, "--last", "2", "--out", t / "avg"], 2, (str(run / "checkpoint-4"), "different tokenizers")
    )


@case("other-sinusoid-layout")
def _(t, a):
    run = run_copy(t, a)
    edit_json(run / "checkpoint-4" / "config.json", lambda c: c.update(sinusoid_layout="concatenated"))
    return Call(
        ["--run_dir", run, "--last", "2", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4"), "different architectures", "sinusoid_layout"),
    )


@case("listed-twice")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", run / "checkpoint-2", run / "checkpoint-4", run / "checkpoint-2", "--out", t / "avg"],
        2,
        (str(run / "checkpoint-2"), "given twice"),
    )


@case("second-name-dotdot")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", run / "checkpoint-2", run / "checkpoint-4" / ".." / "checkpoint-2", "--out", t / "avg"],
        2,
        ("checkpoint-2", "given twice"),
    )


@case("second-name-symlink")
def _(t, a):
    run = run_copy(t, a)
    (t / "alias").symlink_to(run / "checkpoint-4", target_is_directory=True)
    return Call(
        ["--checkpoints", run / "checkpoint-4", t / "alias", "--out", t / "avg"], 2, (str(t / "alias"), "given twice")
    )


@case("second-name-hardlinked-weights")
def _(t, a):
    run = run_copy(t, a)
    other = copy(run / "checkpoint-4", t / "other")
    (other / "model.safetensors").unlink()
    (other / "model.safetensors").hardlink_to(run / "checkpoint-4" / "model.safetensors")
    return Call(
        ["--checkpoints", run / "checkpoint-4", other, "--out", t / "avg"],
        2,
        (str(other / "model.safetensors"), "same file"),
    )


@case("copied-checkpoint")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--checkpoints", run / "checkpoint-2", copy(run / "checkpoint-2", t / "copy"), "--out", t / "avg"],
        2,
        (str(t / "copy" / "model.safetensors"), "exactly the weights"),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Files of the right name and the wrong shape
# ---------------------------------------------------------------------------------------------------------------------


@case("config-json-is-a-list")
def _(t, a):
    run = run_copy(t, a)
    write(run / "checkpoint-4" / "config.json", "[]")
    return Call(
        ["--run_dir", run, "--out", t / "avg"], 2, (str(run / "checkpoint-4" / "config.json"), "must be an object")
    )


@case("config-json-field-of-wrong-type")
def _(t, a):
    run = run_copy(t, a)
    edit_json(run / "checkpoint-4" / "config.json", lambda c: c.update(d_model="16"))
    return Call(
        ["--run_dir", run, "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4" / "config.json"), "field d_model must be an integer"),
    )


@case("safetensors-header-is-a-list")
def _(t, a):
    run = run_copy(t, a)
    header = b"[]"
    write(run / "checkpoint-4" / "model.safetensors", len(header).to_bytes(8, "little") + header)
    return Call(
        ["--run_dir", run, "--out", t / "avg"],
        2,
        (str(run / "checkpoint-4" / "model.safetensors"), "must be an object"),
    )


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

    return Call(
        ["--run_dir", run, "--last", "2", "--out", t / "avg", "--overwrite"], 0, may_change=(t / "avg",), check=check
    )


@case("undeclared-files-left-out-and-named")
def _(t, a):
    """Only a model folder's declared files are copied from the newest checkpoint: 5,000 junk files, a pickle-bearing
    pytorch_model.bin and a stray *.py stay behind, named in one line (a count and the first few names)."""
    run = run_copy(t, a)
    newest = run / "checkpoint-4"
    (newest / "pytorch_model.bin").write_bytes(b"\x80\x04planted pickle")
    write(newest / "helper.py", "import os\n")
    for i in range(5000):
        (newest / f"junk-{i:04d}.txt").write_bytes(b"")

    def check(stdout, stderr):
        out = sorted(p.name for p in (t / "avg").iterdir())
        assert not [n for n in out if n.startswith("junk-") or n in ("pytorch_model.bin", "helper.py")], out
        assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= set(out), out
        assert not {"optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth"} & set(out), out
        named = [line for line in stderr.splitlines() if "left out 5002 file(s)" in line]
        assert len(named) == 1 and "helper.py, junk-0000.txt" in named[0] and "optimizer.pt" not in named[0], stderr

    return Call(["--run_dir", run, "--last", "2", "--out", t / "avg"], 0, may_change=(t / "avg",), check=check)


def two_runs(t: Path, a: Assets) -> tuple[Path, Path]:
    """checkpoint-2 of the shared run, and checkpoint-4 of "another run": the same architecture and tokenizer, the
    history of another seed (other losses from the first step on)."""
    run = run_copy(t, a)
    other = copy(run / "checkpoint-4", t / "other_run" / "checkpoint-4")
    state = json.loads((other / "trainer_state.json").read_text())
    for entry in state["log_history"]:
        entry["loss"] += 0.25
    (other / "trainer_state.json").write_text(json.dumps(state))
    return run / "checkpoint-2", other


@case("checkpoints-of-two-runs")
def _(t, a):
    mine, other = two_runs(t, a)
    return Call(
        ["--checkpoints", mine, other, "--out", t / "avg"],
        2,
        (str(other), str(mine), "different runs", "log histories differ at step 1", "--allow_other_runs"),
    )


@case("checkpoints-of-two-runs-allowed")
def _(t, a):
    mine, other = two_runs(t, a)

    def check(stdout, stderr):
        check_safetensors(t / "avg" / "model.safetensors")

    return Call(
        ["--checkpoints", mine, other, "--out", t / "avg", "--allow_other_runs"],
        0,
        may_change=(t / "avg",),
        check=check,
    )


@case("out-is-the-run-dir")
def _(t, a):
    run = run_copy(t, a)
    return Call(["--run_dir", run, "--out", run], 2, ("--out", str(run)))


@case("out-is-the-run-dir-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--run_dir", run, "--out", run, "--overwrite"],
        2,
        ("--out", str(run), "contains --run_dir's checkpoint-2", "which this command reads"),
    )


@case("out-foreign-overwrite")
def _(t, a):
    run = run_copy(t, a)
    write(t / "avg" / "mine.txt", "precious")
    return Call(
        ["--run_dir", run, "--out", t / "avg", "--overwrite"],
        2,
        ("--out", str(t / "avg"), "not an earlier averaged model folder", "mine.txt"),
    )


@case("out-is-a-checkpoint-overwrite")
def _(t, a):
    run = run_copy(t, a)
    return Call(
        ["--run_dir", run, "--out", run / "checkpoint-4", "--overwrite"],
        2,
        ("--out", str(run / "checkpoint-4"), "is --run_dir's checkpoint-4"),
    )


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
    return Call(
        ["--run_dir", run_copy(t, a), "--last", "2", "--out", t / "avg"],
        130,
        ("interrupted",),
        interrupt="safetensors.torch.save_file",
    )  # inside the atomically written folder


test_cli_contract = case.contract_test()  # every case above
