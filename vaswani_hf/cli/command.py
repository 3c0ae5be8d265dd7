"""A command-line tool is one declaration (`Command`), executed by one runner (`run_command`) in one order.

A `Command` states what the tool is: its name and program name, its parser, the paths it reads and writes by role and
kind (`paths`, a function of the parsed arguments, because which paths a command touches can depend on its flags, e.g.
translate's --engine), the inputs that must agree with each other (`agree`, for example the checkpoints that are
averaged together, or a model and what the Marian export can express), `resolve(args, checked)`, which returns the
plan, and `run(plan)`, which returns the exit status. `run_command` runs any declaration inside `contract.run_cli`,
which turns expected errors into one line, always in this order:

    1. Parse the arguments, and validate the flags that exclude or need each other.
    2. Refuse a relative path where the working folder is gone, an empty path, and a URL.
    3. Check the inputs marked `first`, by kind.
    4. Declare and check the paths (`declare_paths`), refusing an output that is, holds or lies inside an input.
       When the disk fills and the system names no file, the error message names these declared outputs.
    5. Check the other inputs by kind, and refuse an input that can be read only once if it is named twice.
    6. Check that the inputs agree, then check the outputs by kind (the overwrite rules).
    7. Resolve the plan and run it.

This order makes every bad input one line before any work, and a new tool is one declaration, listed in
`vaswani_commands.TOOLS` (vaswani_hf.cli.registry takes the commands from it), plus its test file. A tool that sequences some steps its own way keeps them in its resolve
and run steps: train handles --check, --resume and its run lock there, and push_to_hub handles --dry_run and
--space_only. Each `Kind` wraps one of the package's path checks from vaswani_hf.io, and
`Kind.check(path, what, overwrite)` returns the checked value.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import io
from ..errors import UsageError
from .contract import declare_paths, run_cli


@dataclass(frozen=True)
class Kind:
    """Describe what one path must be, with the check that enforces it.

    `check(path, what, overwrite)` either returns the checked path (or what the check makes of it) or raises a
    UsageError naming `what`, which is the flag unless the `Use` names it otherwise.
    """

    name: str
    check: Callable[[Any, str, bool], Any]


def _folder(path, what, overwrite):
    if not Path(path).is_dir():
        raise io.UsageError(f"{what} {path}: folder not found")
    return Path(path)


def _tokenizer_folder(path, what, overwrite):
    folder = Path(path)
    if not folder.exists():
        raise io.UsageError(f"{what} folder not found: {folder}")
    if not folder.is_dir():
        raise io.UsageError(f"{what} {folder} is a file; give the folder that holds tokenizer.json")
    io.check_library_input(folder, f"{what} {folder}", "the tokenizers library")
    if not (folder / "tokenizer.json").is_file():
        raise io.UsageError(f"{what} {folder}: no tokenizer.json; give a folder written by tokenizer.save_pretrained")
    io.check_tokenizer_file(folder / "tokenizer.json")
    return folder


def _safetensors_checkpoint(path, what, overwrite):
    folder = Path(path)
    if folder.is_dir() and not (folder / io.WEIGHTS).is_file() and not (folder / io.WEIGHTS_INDEX).is_file():
        raise io.UsageError(
            f"{folder}: no {io.WEIGHTS} (nor {io.WEIGHTS_INDEX}); averaging needs safetensors checkpoints"
        )
    # check_model_folder checks that the folder exists, that its config.json (copied to the output) is valid and
    # that its weights are complete.
    return io.check_model_folder(folder, what="checkpoint folder", tokenizer=False)


def _or_stdio(kind: Kind, name: str) -> Kind:
    """Return a kind that accepts what `kind` accepts, or "-" for standard input or output."""
    return Kind(name, lambda p, w, o: p if str(p) == io.STDIO else kind.check(p, w, o))


TEXT_FILE = Kind("text file", lambda p, w, o: io.check_input_file(p, w))


def _model_folder(path, what: str, tokenizer: bool = True) -> Path:
    """Check a model folder and return it; a Hub id (org/name, naming no local path) is first fetched as
    from_pretrained fetches it, into the Hub's cache (from the cache alone with HF_HUB_OFFLINE=1), and its snapshot
    folder is what the tool reads and what is checked."""
    checked = io.check_model_folder(path, what=what, tokenizer=tokenizer)
    if isinstance(checked, Path):
        return checked
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        snapshot = Path(snapshot_download(checked))
    except HFValidationError:
        raise io.UsageError(f"{what} not found: {checked} is no folder here, nor a valid Hub id (org/name)") from None
    except (LocalEntryNotFoundError, RepositoryNotFoundError, HfHubHTTPError, OSError) as error:
        reason = (
            "not in the Hub's cache, and HF_HUB_OFFLINE is set"
            if isinstance(error, LocalEntryNotFoundError)
            else (f"no such model on the Hub ({type(error).__name__})")
        )
        raise io.UsageError(f"{what} not found: {checked} is no folder here, and {reason}") from None
    return io.check_model_folder(snapshot, what=f"{what} {checked}", tokenizer=tokenizer)


MODEL_FOLDER = Kind("model folder (model + tokenizer) or Hub id", lambda p, w, o: _model_folder(p, w))
MODEL_WITHOUT_TOKENIZER = Kind(
    "model folder (tokenizer elsewhere) or Hub id", lambda p, w, o: _model_folder(p, w, tokenizer=False)
)
SAFETENSORS_CHECKPOINT = Kind(
    "checkpoint folder with safetensors weights (one file or shards)", _safetensors_checkpoint
)
FOLDER = Kind("folder", _folder)
TOKENIZER_FOLDER = Kind("tokenizer folder", _tokenizer_folder)
PATH = Kind("path (declared for the relation check only; its reader checks it)", lambda p, w, o: p)
OUTPUT_FILE = Kind("output file", lambda p, w, o: io.check_output_file(p, overwrite=o, what=w))
TEXT_OR_STDIN = _or_stdio(TEXT_FILE, "text file or - (standard input)")
OUTPUT_FILE_OR_STDOUT = _or_stdio(OUTPUT_FILE, "output file or - (standard output)")
TEXT_KINDS = (
    TEXT_FILE,
    TEXT_OR_STDIN,
)  # These are read by io.TextInput, which takes any input kind and reads a pipe only once.


def output_folder(marker: str) -> Kind:
    """Return the kind of an output folder that holds one kind of thing, named by `marker`.

    Its check is `io.check_output_dir` with this marker, so an existing folder is replaced only with overwrite, and
    only if the package wrote it as that same kind.
    """
    return Kind(f"output folder of {marker}", lambda p, w, o: io.check_output_dir(p, overwrite=o, what=w, kind=marker))


@dataclass(frozen=True)
class Use:
    """Describe one path a command reads or writes.

    It holds the flag that names the path, the path itself, its kind, and, where the check's message should not call
    it by the flag, the name to use instead.
    """

    flag: str
    path: Any
    kind: Kind = PATH
    what: str | None = None
    first: bool = (
        False  # Checked before the paths' relations, because its kind gives the clearer message (translate's input).
    )


@dataclass(frozen=True)
class Paths:
    inputs: Sequence[Use] = ()
    outputs: Sequence[Use] = ()
    overwrite: bool = False  # The command's --overwrite: whether an existing output may be replaced.


@dataclass(frozen=True)
class Command:
    name: str  # Names the module vaswani_hf.cli.<name>, tests/test_cli_<name>.py and, by default, scripts/<name>.py.
    prog: str  # The console script, as listed in [project.scripts] of pyproject.toml.
    build_parser: Callable[[], argparse.ArgumentParser]
    run: Callable[[Any], int | None]
    paths: Callable[[Any], Paths] = lambda args: Paths()
    validate: Callable[[Any], None] = lambda args: None
    agree: Callable[[Any, Mapping[str, Any]], None] = lambda args, checked: None
    resolve: Callable[[Any, Mapping[str, Any]], Any] = lambda args, checked: (
        args
    )  # By default the plan is the arguments.
    parse: Callable[[Sequence[str]], Any] | None = (
        None  # A parser of its own (train's takes recipe keys); None means argparse.
    )
    script: str | None = None  # The file scripts/<script>; None means <name>.py.
    invoked_name: bool = (
        False  # If true, error lines start with the name it was invoked by (sys.argv[0]) instead of prog.
    )

    @property
    def script_name(self) -> str:
        return self.script or f"{self.name}.py"

    def main(self, argv: Sequence[str] | None = None) -> int:
        return run_command(self, argv)


def execute(command: Command, argv: Sequence[str]) -> int | None:
    args = command.parse(argv) if command.parse else command.build_parser().parse_args(list(argv))
    command.validate(args)
    paths = command.paths(args)
    checked: dict[str, Any] = {}
    io.check_not_relative(
        {use.flag: use.path for use in (*paths.inputs, *paths.outputs)}
    )  # Refuses relative paths when the working folder is deleted.
    for use in (
        *paths.inputs,
        *paths.outputs,
    ):  # Each path must be non-empty and not a URL, since no tool reads the network.
        if use.path is not None and (not str(use.path) or re.match(r"[A-Za-z][\w+.-]*://", str(use.path))):
            raise UsageError(
                f"{use.flag} is {'empty' if not str(use.path) else 'a URL'}: give a local path"
                + (
                    " (download a Hub model first: hf download ORG/NAME --local-dir DIR)"
                    if use.kind is MODEL_FOLDER and str(use.path)
                    else ""
                )
            )

    def check(uses: Sequence[Use]) -> None:
        for use in uses:
            if use.path is not None:
                checked[use.flag] = use.kind.check(use.path, use.what or use.flag, paths.overwrite)

    check([use for use in paths.inputs if use.first])
    declare_paths(
        inputs={use.flag: use.path for use in paths.inputs}, outputs={use.flag: use.path for use in paths.outputs}
    )
    check([use for use in paths.inputs if not use.first])
    io.check_read_once((use.what or use.flag, use.path) for use in paths.inputs if use.kind in TEXT_KINDS and use.path)
    command.agree(args, checked)
    check(paths.outputs)
    return command.run(command.resolve(args, checked))  # `contract.run_cli` turns None into exit status 0.


def run_command(command: Command, argv: Sequence[str] | None = None) -> int:
    return run_cli(lambda args: execute(command, args), argv, prog=None if command.invoked_name else command.prog)
