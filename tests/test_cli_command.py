"""The one runner of a declaration (vaswani_hf.cli.command.run_command) executes it in its one order, and every
command's test file declares what the shared batteries run (tests/cli_contract.py)."""

from __future__ import annotations

import errno
from collections import defaultdict

import pytest

from vaswani_hf.cli.command import OUTPUT_FILE, TEXT_FILE, Command, Kind, Paths, Use, run_command
from vaswani_hf.cli.contract import ArgumentParser
from vaswani_hf.cli.registry import COMMANDS


def test_each_tool_s_test_file_declares_what_the_batteries_need():
    """The batteries that cover every tool take each tool's command lines from its test file (`Cases`)."""
    from cli_contract import TOOLS, every_tool

    assert TOOLS == tuple(COMMANDS)
    for name, case in every_tool().items():
        assert case.tool == name and callable(case.refused) and callable(case.run) and case.paths, name


def test_the_path_battery_writes_through_every_declared_output(tmp_path):
    """Each output a tool declares (its `paths`) is the output of a case of the path battery, and the reverse (train's
    outputs are its plan's, declared when it is planned)."""
    from cli_contract import every_tool

    (tmp_path / "checkpoint-1").mkdir()  # a --run_dir's checkpoint (every input of the cases below is this folder)
    declared, tested = defaultdict(set), defaultdict(set)
    for case in [path_case for cases in every_tool().values() for path_case in cases.paths]:
        if case.tool == "train":
            continue
        inputs = defaultdict(lambda: tmp_path / "checkpoint-1")
        argv = [str(a) for a in case.argv(inputs, str(tmp_path / "out"), False)]
        command = COMMANDS[case.tool]
        args = command.build_parser().parse_args(argv)
        declared[case.tool] |= {use.flag for use in command.paths(args).outputs if use.path is not None}
        tested[case.tool] |= {case.output} - {None}
    assert declared == tested


def _recording_command(steps: list, fail: str | None = None, run=None) -> Command:
    """A declaration that records each step the runner takes (and refuses at step `fail`)."""
    from vaswani_hf.errors import UsageError

    def step(name, value=None):
        steps.append(name)
        if name == fail:
            raise UsageError(f"refused at {name}")
        return value

    def parser():
        p = ArgumentParser(prog="vaswani-test")
        p.add_argument("--input")
        p.add_argument("--out")
        return p

    def kind(name):
        return Kind(name, lambda path, what, overwrite: step(f"{name} {what}", path))

    return Command(
        "test",
        "vaswani-test",
        parser,
        run or (lambda plan: step("run", 0)),
        validate=lambda args: step("validate"),
        paths=lambda args: step(
            "paths",
            Paths(
                inputs=(Use("--input", args.input, kind("input")),), outputs=(Use("--out", args.out, kind("output")),)
            ),
        ),
        agree=lambda args, checked: step("agree"),
        resolve=lambda args, checked: step("resolve", checked),
    )


def test_the_runner_takes_one_order(tmp_path):
    steps = []
    assert run_command(_recording_command(steps), ["--input", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 0
    assert steps == ["validate", "paths", "input --input", "agree", "output --out", "resolve", "run"]


@pytest.mark.parametrize("fail", ["validate", "input --input", "agree", "output --out", "resolve"])
def test_a_refusal_stops_the_runner_before_any_later_step(fail, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    steps = []
    code = run_command(_recording_command(steps, fail), ["--input", str(tmp_path / "a"), "--out", str(tmp_path / "b")])
    assert code == 2 and steps[-1] == fail and "run" not in steps
    assert capsys.readouterr().err == f"vaswani-test: error: refused at {fail}\n"


def test_an_output_over_an_input_is_refused_before_the_kinds(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    steps = []
    (tmp_path / "a").write_text("x\n")
    assert run_command(_recording_command(steps), ["--input", str(tmp_path / "a"), "--out", str(tmp_path / "a")]) == 2
    assert steps == ["validate", "paths"] and "--out" in capsys.readouterr().err


def test_an_input_marked_first_is_checked_before_the_relations(tmp_path, capsys, monkeypatch):
    """translate's input: a folder is named as a folder, not as the folder that holds --output."""
    from vaswani_hf.cli.translate import COMMAND

    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    assert run_command(COMMAND, [str(tmp_path), "--model", str(tmp_path / "m"), "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.endswith(
        f"error: input file {tmp_path} is a folder; give a file (one sentence per line)\n"
    )


def test_a_full_disk_names_the_running_declaration_s_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)

    def run(plan):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "b"
    assert run_command(_recording_command([], run=run), ["--input", str(tmp_path / "a"), "--out", str(out)]) == 1
    assert (
        capsys.readouterr().err == f"vaswani-test: error: --out {out}: no space left on device; free some space "
        "or write elsewhere\n"
    )


def test_the_kinds_are_the_package_s_checks(tmp_path):
    from vaswani_hf.errors import UsageError

    with pytest.raises(UsageError, match="--files .*absent"):
        TEXT_FILE.check(tmp_path / "absent", "--files", False)
    (tmp_path / "out.txt").write_text("x\n")
    with pytest.raises(UsageError, match="--out"):
        OUTPUT_FILE.check(tmp_path / "out.txt", "--out", False)
    assert OUTPUT_FILE.check(tmp_path / "out.txt", "--out", True) == tmp_path / "out.txt"
