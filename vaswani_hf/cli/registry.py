"""List every command-line tool of the package that is a `command.Command`, by name.

The tools are listed once, in `vaswani_commands.TOOLS` (tool -> module), which the runner reads before vaswani_hf is
imported. The commands here are the tools whose module is in this package (vaswani_hf.cli.<name>) and declares its
`COMMAND`; the Space's page (`vaswani-space`) is a Gradio server, not a command of this contract, so it is not one.
The tests' batteries run every command listed here (tests/cli_contract.py), and tests/test_cli_registry.py checks that
pyproject.toml's [project.scripts] and the `scripts/*.py` shims agree with `TOOLS`.
"""

from __future__ import annotations

from importlib import import_module

from vaswani_commands import TOOLS

from .command import Command

COMMANDS: dict[str, Command] = {
    name: import_module(module).COMMAND for name, module in TOOLS.items() if module.startswith(f"{__package__}.")
}
