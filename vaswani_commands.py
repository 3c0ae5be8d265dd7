"""The commands' runner: every vaswani-* console script and `scripts/*.py` starts here, before vaswani_hf is imported.

The package leaves the process alone; what a command must do to the process before importing it (torch,
transformers), and what can fail during that import, happens here, with the standard library only: a closed
standard descriptor (0, 1, 2) gets /dev/null, so that no file opened later takes its number; a deleted working
folder is one line, exit 2; too little memory (`ulimit -v`) or too few descriptors (`ulimit -n`) for the import
is one line, exit 1. Then `vaswani_hf/cli/<tool>.py`'s `main` runs under `vaswani_hf.cli.contract.run_cli`: the
console script `vaswani-<tool>` is `vaswani_commands:<tool>` (no line here per tool), and
`python -m vaswani_commands <tool> ARGS` runs it too.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from importlib import import_module
from pathlib import Path

STREAMS = ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY))
MODULES = {"space": "vaswani_hf.space"}  # a tool that is no vaswani_hf.cli command -> its module
_TOOLS = Path(__file__).resolve().parent / "vaswani_hf" / "cli"


def occupy_closed_descriptors() -> None:
    """/dev/null on each closed standard descriptor (`sys.stdin` ... stay None)."""
    for fd, mode in STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)  # the lowest free number: `fd` itself unless a lower one is free too
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


def working_folder_problem() -> str | None:
    """What is wrong with the working folder (deleted, unreadable) and what to do, or None."""
    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        try:  # Linux names the deleted folder ("/x/y (deleted)"); $PWD may be a parent process's
            where = " " + os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            where = ""
        return f"the working folder{where} was deleted; cd into an existing folder and run the command again"
    except OSError as error:
        return (
            f"the working folder cannot be read ({os.strerror(error.errno) if error.errno else error}); cd into "
            "a folder you may read and run the command again"
        )


def _file_size_limited() -> bool:
    try:
        import resource  # Unix only
    except ImportError:
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def limit_problem(error: BaseException) -> str | None:
    """Which operating-system limit (memory, descriptors, file size) stopped the command and what to do, or None."""
    text, number = str(error).lower(), getattr(error, "errno", None)
    if isinstance(error, MemoryError) or number == errno.ENOMEM or "failed to map segment" in text:
        return "out of memory (the memory limit, ulimit -v, or the machine's); raise the limit or free memory"
    if number in (errno.EMFILE, errno.ENFILE) or "too many open files" in text:
        return "too many open files (the limit on open descriptors, ulimit -n); raise it, e.g. ulimit -n 4096"
    if number == errno.EFBIG or "file too large" in text or (_file_size_limited() and "unexpected pos" in text):
        return "file too large for the file-size limit (ulimit -f); raise it (ulimit -f unlimited)"
    return None


def debug_requested(argv) -> bool:
    """--debug among the arguments, or VASWANI_DEBUG=1: every traceback is shown."""
    return "--debug" in argv or os.environ.get("VASWANI_DEBUG", "").lower() in ("1", "true", "yes")


def _refuse(line: str, code: int) -> int:
    if sys.stderr is not None:
        print(f"{Path(sys.argv[0]).name if sys.argv and sys.argv[0] else 'vaswani'}: error: {line}", file=sys.stderr)
    return code


def run(tool: str, argv=None) -> int:
    """Prepare the process, import the tool's module and run its `main(argv)` (see the module docstring)."""
    occupy_closed_descriptors()
    problem = working_folder_problem()
    if problem:
        return _refuse(problem, 2)
    module = MODULES.get(tool, f"vaswani_hf.cli.{tool}")
    try:
        main = getattr(import_module(module), "main", None)
    except (MemoryError, ImportError, OSError) as error:
        missing = getattr(error, "name", None) or ""
        if debug_requested(sys.argv):
            raise
        if missing == module:
            return _refuse(f"no tool {tool!r}; the tools: {', '.join(tools())}", 2)
        if isinstance(error, ModuleNotFoundError) and not missing.startswith("vaswani_hf"):
            return _refuse(
                f"the package {missing!r} that vaswani_hf needs is not installed ({sys.executable}); "
                "install vaswani_hf with its dependencies (pip install vaswani_hf, or pip install -e .)",
                1,
            )
        if limit_problem(error) is None:
            raise
        return _refuse(limit_problem(error), 1)
    if main is None:
        return _refuse(f"no tool {tool!r}; the tools: {', '.join(tools())}", 2)
    try:
        return main(argv)
    except Exception as error:  # --debug let it through: its traceback, then the status its one line would have had
        traceback.print_exc()
        return getattr(error, "exit_status", 1)  # set by the boundary (vaswani_hf.cli.contract) on an expected one


def tools() -> list[str]:
    """The installed tools' names (the console scripts that start here)."""
    from importlib.metadata import entry_points

    return sorted(
        e.value.split(":")[1] for e in entry_points(group="console_scripts") if e.value.startswith("vaswani_commands:")
    ) or ["(none installed: pip install -e .)"]


def __getattr__(tool: str):
    """`vaswani_commands.<tool>`: the console script of vaswani_hf/cli/<tool>.py (or of `MODULES`)."""
    if tool not in MODULES and not (_TOOLS / f"{tool}.py").is_file() or tool.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {tool!r}")
    return lambda argv=None: run(tool, argv)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(
            f"usage: python -m vaswani_commands <tool> [arguments]; the tools: {', '.join(tools())}", file=sys.stderr
        )
        sys.exit(2)
    sys.argv = [f"vaswani-{sys.argv[1].replace('_', '-')}", *sys.argv[2:]]
    sys.exit(run(sys.argv[0].removeprefix("vaswani-").replace("-", "_")))
