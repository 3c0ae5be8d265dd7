"""The command-line contract every vaswani-* tool runs under: one error boundary, one parser, one declaration of paths.

- `run_cli(main, argv)`: the tool's return value is its exit status. Expected bad input (`UsageError`) is one line on
  stderr naming the file, line, flag or key and what to do, exit status 2; an expected failure of the run itself
  (`RunFailure`, a full disk, a closed output pipe) is one line and exit status 1; Ctrl-C is exit status 130.
  The operating system's conditions (no space left, permission denied, a symbolic-link loop, a read-only file system)
  are mapped to one line too, naming the file, or the outputs the command declared when the system does not say
  which file. Anything else is a bug and keeps its traceback. `--debug` (or VASWANI_DEBUG=1) shows every traceback.
- `ArgumentParser`: argparse whose usage errors are `UsageError`s; flags declare their constraints as argparse types
  (`vaswani_hf.constraints`: `number(int, min=1)`, `device`), so a bad value names its flag before any work.
- `declare_paths(inputs=..., outputs=...)`: what a command reads and writes, checked by the one guard
  (`vaswani_hf.io.check_paths`: no output is, contains or lies inside an input) and remembered for the messages above.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from .. import io
from ..errors import STDIO, UsageError, VaswaniError, one_line

_declared_outputs: list[str] = []  # "--flag path" of the running command's outputs (for OS error messages)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is a `UsageError` (one line through `run_cli`) instead of usage text + exit, every
    tool has `--debug`, and the description (the tool's module docstring) keeps its line breaks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        add_debug_argument(self)

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (also: environment variable VASWANI_DEBUG=1)")


def declare_paths(inputs: Mapping[str, str | os.PathLike | None],
                  outputs: Mapping[str, str | os.PathLike | None], *, check: bool = True) -> None:
    """A command's inputs and outputs by flag: checked by `io.check_paths` before any work (`check=False`: the
    caller checked them, e.g. a training run's plan), and named by the error boundary when the disk fills (the
    system names no file for a failed write, or names the file being copied from)."""
    if check:
        io.check_paths(inputs, outputs)
    _declared_outputs[:] = [f"{flag} {path}" for flag, path in outputs.items() if path is not None]


def _debug_requested(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("VASWANI_DEBUG", "").lower() in ("1", "true", "yes")


# What the operating system reports -> (exit status, what it means, what to do)
OS_CONDITIONS = {
    errno.ENOSPC: (1, "no space left on device", "free some space or write elsewhere"),
    errno.EDQUOT: (1, "disk quota exceeded", "free some space or write elsewhere"),
    errno.EACCES: (2, "permission denied", "check the permissions"),
    errno.EPERM: (2, "operation not permitted", "check the permissions"),
    errno.EROFS: (2, "read-only file system", "write elsewhere"),
    errno.ELOOP: (2, "too many levels of symbolic links (a link loop)", "fix or remove the link"),
    errno.ENAMETOOLONG: (2, "file name too long", "use a shorter name"),
    errno.EISDIR: (2, "is a folder", "give a file"),
    errno.ENOTDIR: (2, "a part of the path is not a folder", "check the path"),
    errno.EMFILE: (1, "too many open files", "raise the limit (ulimit -n)"),
}
# Libraries that write through their own code (Rust, C++) report a full disk in their message only.
_DISK_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "file write failed")


def expected_os_failure(error: BaseException) -> tuple[int, str] | None:
    """(exit status, one line) for an operating-system condition a user can act on, or None (a bug: traceback)."""
    if isinstance(error, BrokenPipeError) or getattr(error, "errno", None) == errno.EPIPE:
        return 1, "standard output was closed before all output was written (broken pipe)"
    if isinstance(error, OSError) and error.errno in OS_CONDITIONS:
        code, meaning, action = OS_CONDITIONS[error.errno]
        where = error.filename
        if error.errno in (errno.ENOSPC, errno.EDQUOT) and _declared_outputs:
            where = " and ".join(_declared_outputs)
        return code, f"{where}: {meaning}; {action}" if where else f"{meaning}; {action}"
    text = str(error).lower()
    if isinstance(error, (OSError, RuntimeError, Exception)) and any(t in text for t in _DISK_FULL_TEXT):
        where = " and ".join(_declared_outputs) or "an output"
        return 1, f"{where}: writing failed, no space left on device ({one_line(error, 160)}); free some space or " \
                  "write elsewhere"
    return None


def run_cli(main: Callable[[list[str]], int | None], argv: Sequence[str] | None = None,
            prog: str | None = None) -> int:
    """Run a tool's `main(argv)` under the contract (see the module docstring). transformers' own progress bars
    (loading and writing weights) are off meanwhile."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name
    _declared_outputs.clear()
    if _debug_requested(argv):
        with _library_progress_bars_off():
            code = main(argv)
        return 0 if code is None else int(code)
    try:
        with _library_progress_bars_off():
            code = main(argv)
        _flush_stdout()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except VaswaniError as error:
        _report(f"{prog}: error: {one_line(error)}")
        return error.exit_code
    except Exception as error:  # an OS condition is one line; anything else is a bug and keeps its traceback
        failure = expected_os_failure(error)
        if failure is None:
            raise
        if isinstance(error, BrokenPipeError) or getattr(error, "errno", None) == errno.EPIPE:
            _silence_stdout()
        _report(f"{prog}: error: {failure[1]}")
        return failure[0]
    finally:
        _declared_outputs.clear()
    return 0 if code is None else int(code)


def _report(line: str) -> None:
    """The one error line, on stderr. Under a multi-process launcher every process refuses the same input the same
    way: only the first process (rank 0) says so, so that the user reads the line once."""
    if int(os.environ.get("RANK", "0") or 0) == 0:
        print(line, file=sys.stderr)


def _flush_stdout() -> None:
    """Flush standard output inside the boundary, so that a closed pipe is reported here, not at interpreter exit."""
    try:
        sys.stdout.flush()
    except ValueError:  # stdout already closed
        pass


def _silence_stdout() -> None:
    """After a broken pipe, point standard output at /dev/null so that Python's final flush does not print a
    second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests capture it)
        pass


@contextmanager
def _library_progress_bars_off():
    """transformers' own progress bars (loading and writing weights) are off while a tool runs: they are not the
    tool's progress, and a bar left on stderr before an error would break the one-line rule. The tools' own bars and
    huggingface_hub's download bars stay; the previous state is restored afterwards (for in-process callers)."""
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
        from transformers.utils import logging as transformers_logging
    except ImportError:
        yield
        return
    was_enabled, hub_was_disabled = transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()

    def switch(transformers_on: bool) -> None:
        """transformers' switch also switches the hub's bars: the hub's own state is put back each time."""
        with warnings.catch_warnings():  # the hub warns when HF_HUB_DISABLE_PROGRESS_BARS forbids a change
            warnings.simplefilter("ignore")
            if transformers_on:
                transformers_logging.enable_progress_bar()
            else:
                transformers_logging.disable_progress_bar()
            (disable_progress_bars if hub_was_disabled else enable_progress_bars)()

    switch(False)
    try:
        yield
    finally:
        switch(was_enabled)


__all__ = ["ArgumentParser", "add_debug_argument", "declare_paths", "run_cli", "expected_os_failure", "STDIO"]
