"""Train the Transformer (Vaswani et al., 2017) with a recipe.

    vaswani-train                                          # the `default` recipe: tiny model, sample corpus
    vaswani-train --recipe multi30k-en-de --max_train_minutes 120
    vaswani-train --recipe recipes/my.yaml --dropout 0.2 --output_dir outputs/x
    vaswani-train --recipe wmt14-en-de-base --resume                   # continue from the newest complete checkpoint
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml scripts/train.py --recipe wmt14-en-de-base
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 scripts/train.py   # 2 CPU processes (gloo)

Every recipe key can be overridden with `--key value`. A list is given as several values or in YAML syntax
(`--translate_examples '["a", "b"]'`), and null as `--key null`. `--list-keys` prints all keys with their types,
ranges, defaults and meaning, and `--list-recipes` prints the bundled recipes. `--check` validates the recipe, the
output folder and every line of the corpus files, then exits. A folder that holds a previous run is continued with
`--resume` or replaced with `--overwrite`. A finished run that is resumed does nothing and says so, and a folder
another run is writing into is refused.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..training.plan import plan_run
from ..training.recipe import (
    KEYS,
    MODEL_SECTION,
    SECTIONS,
    SETTINGS,
    RecipeError,
    list_recipes,
    load_recipe,
    section_keys,
    section_title,
    unknown_keys,
    value_from_text,
)
from ..training.run import run_training, setup_logging
from .command import Command
from .contract import HelpFormatter, add_debug_argument, declare_paths, release_library_reports


@dataclass
class CommandOptions:
    _argument_group_name = "command"
    recipe: str | None = field(
        default=None, metadata={"help": "bundled recipe name or YAML file (default: default; --resume: the run's own)"}
    )
    check: bool = field(
        default=False, metadata={"help": "validate the recipe, output folder and corpus files (streamed), then exit"}
    )
    list_keys: bool = field(
        default=False, metadata={"help": "print every recipe key with its type, range, default and meaning, then exit"}
    )
    list_recipes: bool = field(default=False, metadata={"help": "print the bundled recipes, then exit"})
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "replace a previous run's files in output_dir (without it, a non-empty output_dir is refused "
            "unless --resume)"
        },
    )


# How the command line shows a recipe key: its help with its range, its type, and the text of --list-keys.


def help_text(name: str) -> str:
    """Return a key's help text with its range, as `--help` and `--list-keys` show it."""
    limits = SETTINGS[name].limits() if SETTINGS[name].type in (int, float) else ""
    return SETTINGS[name].help + (f" [{limits}]" if limits else "")


def type_name(name: str) -> str:
    """Return a key's type as `--list-keys` shows it, such as "int", "int or auto", "str or null" or "one of ..."."""
    s = SETTINGS[name]
    text = (
        "one of " + ", ".join(map(str, s.choices))
        if s.choices
        else "list of str"
        if s.type is list
        else s.type.__name__
    )
    return text + "".join(f" or {w}" for w in s.words) + (" or null" if s.nullable else "")


def format_keys() -> str:
    """Return the text `--list-keys` prints: every key, grouped as in the recipe sections."""
    lines = []
    for section in SECTIONS:
        lines.append(f"# {section_title(section)}")
        for name in section_keys(section):
            lines.append(
                f"--{name:<28} {type_name(name):<14} default {SETTINGS[name].default!r}\n      {help_text(name)}"
            )
    return "\n".join(lines)


_LISTS = {name for name, s in SETTINGS.items() if s.type is list}


class RecipeParser(HfArgumentParser):
    """Parse the recipe sections' keys and the command's options with HfArgumentParser, returning only the keys given.

    `load_recipe` merges the given keys over the recipe file. A usage error raises a RecipeError, which `run_cli`
    reports in one line with exit status 2. The model section is `VaswaniConfig`, of which only the settings a recipe
    sets are flags (`_add_dataclass_arguments`).
    """

    def __init__(self):
        super().__init__(
            (CommandOptions, *SECTIONS.values()),
            prog="vaswani-train",
            description=__doc__,
            formatter_class=HelpFormatter,
            allow_abbrev=False,
        )
        add_debug_argument(self)
        for action in self._actions:
            if action.dest in KEYS:
                action.default = argparse.SUPPRESS  # A key that is not given keeps the recipe file's value.
                action.help = help_text(action.dest)
                if action.nargs != 0:  # A key that takes a value; a boolean's `--no_KEY` takes none.
                    action.help += (
                        f" (default: {SETTINGS[action.dest].default!r}, where the recipe file does not set it)"
                    )
                if action.dest not in _LISTS and action.type not in (None, bool) and action.nargs != 0:
                    action.type = _text_converter(action.dest)

    def error(self, message: str):
        raise RecipeError(f"{message} (see --help)")

    def _add_dataclass_arguments(self, dtype):
        """Add a section's keys as HfArgumentParser adds a dataclass's fields; of the model section, `VaswaniConfig`,
        only the settings a recipe sets, each typed by its declaration's kind of value."""
        if dtype is not SECTIONS["model"]:
            return super()._add_dataclass_arguments(dtype)
        group = self.add_argument_group(MODEL_SECTION)
        for declared in dataclasses.fields(dtype):
            if declared.name in section_keys("model"):
                plain = copy.copy(declared)
                setting = SETTINGS[declared.name]
                plain.type = str if setting.choices else setting.type
                self._parse_dataclass_field(group, plain)

    @staticmethod
    def _parse_dataclass_field(parser, field):
        """Add a field to the parser passing only its help on to argparse, and none of its other metadata.

        HfArgumentParser would pass all of a field's metadata to argparse as keywords. The declaration's range and
        choices are checked once instead, when the recipe is built.
        """
        plain = copy.copy(field)
        plain.metadata = types.MappingProxyType({k: v for k, v in field.metadata.items() if k == "help"})
        HfArgumentParser._parse_dataclass_field(parser, plain)


def _text_converter(name: str):
    def convert(text: str):
        try:
            return value_from_text(name, text)
        except RecipeError as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from None

    convert.__name__ = type_name(name)
    return convert


def parse_command_line(argv: Sequence[str]):
    """Parse `--recipe NAME_OR_PATH` and `--key value` pairs, and return (the checked Recipe, the command's options).

    The recipe is None for --list-keys and --list-recipes. An unknown key or argument raises a RecipeError.
    """
    parser = RecipeParser()
    namespace, remaining = parser.parse_known_args(list(argv))
    if remaining:
        unknown = [a[2:].split("=")[0].replace("-", "_") for a in remaining if a.startswith("--")]
        if unknown:
            raise unknown_keys(unknown, "command line")
        raise RecipeError(f"unexpected argument {remaining[0]!r}: use --recipe NAME_OR_PATH and --key value pairs")
    values = vars(namespace)
    options = CommandOptions(**{f.name: values.pop(f.name) for f in dataclasses.fields(CommandOptions)})
    values.pop("debug", None)
    if options.list_keys or options.list_recipes:
        return None, options
    for name in [
        n for n in values if n in _LISTS
    ]:  # A list is given as several values, or as one in YAML syntax ('["a", "b"]').
        value = values[name]
        values[name] = (
            value_from_text(name, value[0]) if len(value) == 1 and value[0].lstrip().startswith("[") else value
        )
    return load_recipe(options.recipe, values), options


def _resolve(parsed, checked):
    """Return the text to print (a listing, or --check's verdict), or else the one plan of the run.

    `plan_run` checks every path the run reads or writes. The plan's output folders are then declared to the error
    boundary, so that if the disk fills during the run, its one-line message can name the folder being written.
    """
    recipe, options = parsed
    if options.list_keys:
        return format_keys()
    if options.list_recipes:
        return "\n".join(list_recipes())
    if (
        not options.check
    ):  # The run's log (standard output) then shows what planning decides, such as a checkpoint skipped.
        setup_logging()
    plan = plan_run(recipe, overwrite=options.overwrite)
    declare_paths(inputs={}, outputs={"output_dir": plan.output_dir, "export_dir": plan.export_folder}, check=False)
    if options.check:
        counts = {source.key: source.scan() for source in plan.sources.values() if source is not None}
        corpus = ", ".join(f"{k}: {c[0]:,} pairs ({c[1]:,} usable)" for k, c in counts.items() if c is not None)
        return f"recipe {recipe.name} OK; {plan.describe()}" + (f"; {corpus}" if corpus else "")
    return plan


def _run(plan) -> None:
    if isinstance(plan, str):  # A listing, or --check's verdict.
        print(plan)
        return
    release_library_reports()  # The run's plan holds, so what libraries say while it trains is shown when it is said.
    run_training(plan)


COMMAND = Command(
    "train", "vaswani-train", RecipeParser, _run, parse=parse_command_line, resolve=_resolve, invoked_name=True
)
main = COMMAND.main

if __name__ == "__main__":  # For python -m vaswani_hf.cli.<tool>; the console script goes through vaswani_commands.
    sys.exit(main())
