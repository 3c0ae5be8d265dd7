"""Run the commands: every vaswani-* console script and `scripts/*.py` starts here, before vaswani_hf is imported.

The package leaves the process alone. What a command must do to the process before importing the package (and
torch and transformers), and what can fail during that import, is handled here with the standard library only:

- A closed standard descriptor (0, 1, 2) gets /dev/null, so that no file opened later takes its number.
- A deleted working folder is left for "/", because torch's import aborts the process without one. A command naming
  only absolute paths then runs, and one naming a relative path is refused in one line by the path check.
- Too little memory (`ulimit -v`) or too few descriptors (`ulimit -n`) for the import is one line with exit status 1.

Then the tool's module (`TOOLS`) runs its `main` under `vaswani_hf.cli.contract.run_cli`. The console script
`vaswani-<tool>` is `vaswani_commands:<tool>`, a function below; `python -m vaswani_commands <tool> ARGS` runs it too.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import traceback
from functools import partial
from importlib import import_module
from pathlib import Path

STREAMS = ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))

# Maps each tool, by the name of its console script's function, to the module whose `main(argv)` runs it. In
# pyproject.toml that is `vaswani-<name> = "vaswani_commands:<name>"`, with dashes for underscores.
# tests/test_cli_registry.py checks this table against vaswani_hf/cli/registry.py (every command's module),
# pyproject.toml's scripts and scripts/*.py.
TOOLS = {
    "train": "vaswani_hf.cli.train",
    "translate": "vaswani_hf.cli.translate",
    "evaluate": "vaswani_hf.cli.evaluate",
    "train_tokenizer": "vaswani_hf.cli.train_tokenizer",
    "average_checkpoints": "vaswani_hf.cli.average_checkpoints",
    "export_marian": "vaswani_hf.cli.export_marian",
    "export_ctranslate2": "vaswani_hf.cli.export_ctranslate2",
    "visualize_attention": "vaswani_hf.cli.visualize_attention",
    "push_to_hub": "vaswani_hf.cli.push_to_hub",
    "space": "vaswani_hf.space.page",  # The Space's page is a Gradio server, not a vaswani_hf.cli command.
}


def occupy_closed_descriptors() -> None:
    """Put /dev/null on each standard descriptor (0, 1, 2) that is closed, so that no file opened later takes its
    number.

    Python's `sys.stdin`, `sys.stdout` and `sys.stderr` stay as they are (None), and
    `vaswani_hf.cli.surroundings.own_streams` gives the tool its stand-ins for them."""
    for fd, mode in STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            # open() takes the lowest free number, which is `fd` itself unless a lower one is free too.
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


def working_folder_state() -> str | None:
    """Return what is wrong with the working folder, or None when nothing is.

    The answer reads "the working folder /x/y was deleted" or "the working folder cannot be read (...)".
    """
    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        # Linux names the deleted folder ("/x/y (deleted)"); $PWD is not used, since it may be a parent process's.
        try:
            where = " " + os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            where = ""
        return f"the working folder{where} was deleted"
    except OSError as error:
        return f"the working folder cannot be read ({os.strerror(error.errno) if error.errno else error})"


def working_folder_problem() -> str | None:
    """Return one line saying what is wrong with the working folder and what to do, or None when nothing is."""
    state = working_folder_state()
    return None if state is None else f"{state}; cd into an existing folder and run the command again"


_left = {"state": None}  # What was wrong with the working folder this process left for "/".


def leave_an_unusable_working_folder() -> str | None:
    """Move to "/" if the working folder was deleted or cannot be read, and return what was wrong with it, or None.

    torch's import aborts the process without a working folder, yet a command that names only absolute paths needs
    none, so it runs. A relative path would now mean a place under "/", and the path check
    (`vaswani_hf.io.check_paths`) refuses it in one line. The answer holds while the process stays in "/"."""
    state = working_folder_state()
    if state is not None:
        os.chdir(os.sep)
        sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]  # They meant the folder that was left.
        _left["state"] = state
    elif _left["state"] is not None and os.getcwd() != os.sep:
        _left["state"] = None  # The process has moved on, because an in-process caller changed folders.
    return _left["state"]


def _file_size_limited() -> bool:
    try:
        import resource  # The resource module exists on Unix only.
    except ImportError:
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def limit_problem(error: BaseException) -> str | None:
    """Return which operating-system limit (memory, descriptors, file size) stopped the command and what to do.

    None means no such limit was the cause.
    """
    text, number = str(error).lower(), getattr(error, "errno", None)
    if isinstance(error, MemoryError) or number == errno.ENOMEM or "failed to map segment" in text:
        return "out of memory (the memory limit, ulimit -v, or the machine's); raise the limit or free memory"
    if number in (errno.EMFILE, errno.ENFILE) or "too many open files" in text:
        return "too many open files (the limit on open descriptors, ulimit -n); raise it, e.g. ulimit -n 4096"
    if number == errno.EFBIG or "file too large" in text or (_file_size_limited() and "unexpected pos" in text):
        return "file too large for the file-size limit (ulimit -f); raise it (ulimit -f unlimited)"
    return None


def debug_requested(argv) -> bool:
    """Return whether every traceback is to be shown: --debug is among the arguments, or VASWANI_DEBUG=1 (or true)."""
    return "--debug" in argv or os.environ.get("VASWANI_DEBUG", "").lower() in ("1", "true", "yes")


def _program() -> str:
    return Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "vaswani"


def _refuse(line: str, code: int) -> int:
    if sys.stderr is not None:
        print(f"{_program()}: error: {line}", file=sys.stderr)
    return code


def _interrupted() -> int:
    """Print "<program>: interrupted" on stderr and return Ctrl-C's exit status (128 + SIGINT), as `run_cli` does."""
    if sys.stderr is not None:
        print(f"{_program()}: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT


def run(tool: str, argv=None) -> int:
    """Prepare the process, import the tool's module, run its `main(argv)` and return its exit status.

    The module docstring describes the preparation. A module that cannot be imported for a missing package or an
    operating-system limit is reported in one line with exit status 1, and an unknown tool with exit status 2."""
    occupy_closed_descriptors()
    leave_an_unusable_working_folder()
    if tool not in TOOLS:
        return _refuse(f"no tool {tool!r}; the tools: {', '.join(tools())}", 2)
    module = TOOLS[tool]
    try:
        main = import_module(module).main
    except KeyboardInterrupt:
        # Ctrl-C while the tool's libraries load (torch alone takes seconds on a busy machine) comes before the tool's
        # own boundary exists; it ends the command as an interruption anywhere later would: one line, status 130.
        if debug_requested(sys.argv):
            raise
        return _interrupted()
    except (MemoryError, ImportError, OSError) as error:
        missing = getattr(error, "name", None) or ""
        if debug_requested(sys.argv):
            raise
        if isinstance(error, ModuleNotFoundError) and not missing.startswith("vaswani_hf"):
            return _refuse(
                f"the package {missing!r} that vaswani_hf needs is not installed ({sys.executable}); "
                "install vaswani_hf with its dependencies (pip install vaswani_hf, or pip install -e .)",
                1,
            )
        if limit_problem(error) is None:
            raise
        return _refuse(limit_problem(error), 1)
    try:
        return main(argv)
    # --debug let the error through: print its traceback, then return the status its one line would have had.
    except Exception as error:
        traceback.print_exc()
        return getattr(error, "exit_status", 1)  # The boundary (cli.contract) sets it on an expected failure.


def tools() -> list[str]:
    """Return the tools' names (the keys of `TOOLS`), sorted."""
    return sorted(TOOLS)


# The console scripts (pyproject.toml's [project.scripts]) and scripts/*.py call these, one per entry of `TOOLS`.
train = partial(run, "train")
translate = partial(run, "translate")
evaluate = partial(run, "evaluate")
train_tokenizer = partial(run, "train_tokenizer")
average_checkpoints = partial(run, "average_checkpoints")
export_marian = partial(run, "export_marian")
export_ctranslate2 = partial(run, "export_ctranslate2")
visualize_attention = partial(run, "visualize_attention")
push_to_hub = partial(run, "push_to_hub")
space = partial(run, "space")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(
            f"usage: python -m vaswani_commands <tool> [arguments]; the tools: {', '.join(tools())}", file=sys.stderr
        )
        sys.exit(2)
    sys.argv = [f"vaswani-{sys.argv[1].replace('_', '-')}", *sys.argv[2:]]
    sys.exit(run(sys.argv[0].removeprefix("vaswani-").replace("-", "_")))
