"""The registry of command-line tools (vaswani_hf.cli.registry) is the one list: pyproject.toml's console scripts, the
scripts/*.py shims, each tool's module and test file and the batteries' command tables agree with it; and the one
runner (vaswani_hf.cli.command.run_command) executes a declaration in its one order."""

from __future__ import annotations

import ast
import errno
import importlib
from collections import defaultdict
from pathlib import Path

import pytest
import tomllib

from vaswani_hf.cli.command import OUTPUT_FILE, TEXT_FILE, Command, Kind, Paths, Use, run_command
from vaswani_hf.cli.contract import ArgumentParser
from vaswani_hf.cli.registry import COMMANDS, OTHER_SCRIPTS, console_scripts

REPO = Path(__file__).resolve().parents[1]
NOT_TOOLS = {"make_readme_attention_plot.py"}  # a maintainer's script that draws the README's figure, not a tool


def test_pyproject_scripts_are_the_registry():
    """Each console script is the runner's function of a registered tool (`vaswani_commands.<tool>`), which runs
    that tool's module's `main`."""
    import vaswani_commands

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    missing = [f'{prog} = "{entry}"' for prog, entry in console_scripts().items() if scripts.get(prog) != entry]
    assert scripts == console_scripts(), f"pyproject.toml's [project.scripts] lacks or differs in: {missing}"
    for target in scripts.values():
        module, name = target.split(":")
        function = getattr(vaswani_commands, name)
        assert module == "vaswani_commands" and function.func is vaswani_commands.run and function.args == (name,)


def test_the_runner_s_table_is_the_registry():
    """The runner's explicit table (`vaswani_commands.TOOLS`: console script -> module) names each registered
    command's module and the Space's page, nothing else, and has a console-script function per entry."""
    import vaswani_commands

    assert vaswani_commands.TOOLS == {
        **{name: f"vaswani_hf.cli.{name}" for name in COMMANDS},
        **{entry.split(":")[1]: "vaswani_hf.space.page" for entry in OTHER_SCRIPTS.values()},
    }
    for name, module in vaswani_commands.TOOLS.items():
        assert callable(importlib.import_module(module).main), module
        assert getattr(vaswani_commands, name).args == (name,)
    assert not hasattr(vaswani_commands, "no_such_tool") and not hasattr(vaswani_commands, "__getattr__")


@pytest.mark.parametrize("name", COMMANDS)
def test_each_tool_is_its_module_s_declaration_with_a_shim_and_a_test_file(name):
    command = COMMANDS[name]
    import vaswani_commands

    module = importlib.import_module(vaswani_commands.TOOLS[name])
    assert module.COMMAND is command and command.name == name
    assert command.build_parser().prog == command.prog
    shim = REPO / "scripts" / command.script_name
    assert shim.is_file(), f"add {shim.relative_to(REPO)}: `from vaswani_commands import {name}`, sys.exit({name}())"
    imports = [
        node for node in ast.walk(ast.parse(shim.read_text(encoding="utf-8"))) if isinstance(node, ast.ImportFrom)
    ]
    assert ("vaswani_commands", [name]) in [(i.module, [a.name for a in i.names]) for i in imports]
    assert (REPO / "tests" / f"test_cli_{name}.py").is_file()


def test_every_shim_is_a_registered_tool():
    shims = {p.name for p in (REPO / "scripts").glob("*.py")} - NOT_TOOLS
    assert shims == {command.script_name for command in COMMANDS.values()}
    assert not set(OTHER_SCRIPTS) & {command.prog for command in COMMANDS.values()}


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
