"""The tools are listed once, in `vaswani_commands.TOOLS`; what packaging needs written out elsewhere agrees with it:
pyproject.toml's [project.scripts], the `scripts/*.py` shims (which `accelerate launch scripts/train.py` runs) and the
commands of vaswani_hf.cli.registry, each its module's declaration with its test file."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import tomllib

import vaswani_commands
from vaswani_hf.cli.registry import COMMANDS

REPO = Path(__file__).resolve().parents[1]
NOT_TOOLS = {"make_readme_attention_plot.py"}  # a maintainer's script that draws the README's figure, not a tool


def _shim_tool(path: Path) -> str | None:
    """Return the tool whose console-script function the shim imports (`from vaswani_commands import <tool>`)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "vaswani_commands":
            return node.names[0].name
    return None


def test_pyproject_scripts_are_the_tools():
    """pyproject.toml lists `vaswani-<tool> = "vaswani_commands:<tool>"` for each tool and nothing else, and each is
    a function of the runner that runs its tool."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    wanted = vaswani_commands.console_scripts()
    fix = "\n".join(f'{prog} = "{entry}"' for prog, entry in wanted.items())
    assert scripts == wanted, f"pyproject.toml's [project.scripts] should read:\n{fix}"
    for name in vaswani_commands.TOOLS:
        function = getattr(vaswani_commands, name)
        assert function.func is vaswani_commands.run and function.args == (name,)
        assert name not in vars(vaswani_commands), f"the tool {name!r} is hidden by the runner's own {name!r}"
    assert not hasattr(vaswani_commands, "no_such_tool")


def test_every_tool_module_has_a_main():
    for module in vaswani_commands.TOOLS.values():
        assert callable(importlib.import_module(module).main), module


def test_the_shims_are_the_commands():
    """Each command has its shim, scripts/<script_name>, which imports its console-script function; no other shim."""
    shims = {path.name: _shim_tool(path) for path in (REPO / "scripts").glob("*.py") if path.name not in NOT_TOOLS}
    wanted = {command.script_name: name for name, command in COMMANDS.items()}
    missing = [f"scripts/{script} (`from vaswani_commands import {name} as main`)" for script, name in wanted.items()]
    assert shims == wanted, f"the shims should be exactly: {', '.join(missing)}"


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_is_its_module_s_declaration_with_a_test_file(name):
    command = COMMANDS[name]
    assert command.name == name and f"vaswani-{name.replace('_', '-')}" == command.prog == command.build_parser().prog
    assert (REPO / "tests" / f"test_cli_{name}.py").is_file()
