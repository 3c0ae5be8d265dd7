"""List every command-line tool of the package by name.

This is the one list that pyproject.toml's [project.scripts], the `scripts/*.py` shims and the tests' batteries are
checked against (tests/test_cli_registry.py). A new tool
is one declaration (a `command.Command` in its module vaswani_hf/cli/<name>.py) added here in one line, plus its test
file tests/test_cli_<name>.py. The Space's page (`vaswani-space`, vaswani_hf.space) is a Gradio server, not a command
of this contract, so it is listed apart, in `OTHER_SCRIPTS`.
"""

from __future__ import annotations

from .average_checkpoints import COMMAND as AVERAGE_CHECKPOINTS
from .command import Command
from .evaluate import COMMAND as EVALUATE
from .export_ctranslate2 import COMMAND as EXPORT_CTRANSLATE2
from .export_marian import COMMAND as EXPORT_MARIAN
from .push_to_hub import COMMAND as PUSH_TO_HUB
from .train import COMMAND as TRAIN
from .train_tokenizer import COMMAND as TRAIN_TOKENIZER
from .translate import COMMAND as TRANSLATE
from .visualize_attention import COMMAND as VISUALIZE_ATTENTION

COMMANDS: dict[str, Command] = {
    command.name: command
    for command in (
        TRAIN,
        TRANSLATE,
        EVALUATE,
        TRAIN_TOKENIZER,
        AVERAGE_CHECKPOINTS,
        EXPORT_MARIAN,
        EXPORT_CTRANSLATE2,
        VISUALIZE_ATTENTION,
        PUSH_TO_HUB,
    )
}

OTHER_SCRIPTS = {"vaswani-space": "vaswani_commands:space"}  # The Space's page, a Gradio server.


def console_scripts() -> dict[str, str]:
    """Return [project.scripts] as the registry declares it, mapping each program name to "module:function"."""
    return {
        **{c.prog: f"vaswani_commands:{c.name}" for c in COMMANDS.values()},
        **OTHER_SCRIPTS,
    }  # Every tool starts through the runner.
