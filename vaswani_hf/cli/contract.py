"""Define the command-line contract every vaswani-* tool runs under: one error boundary, parser and path declaration.

- `run_cli(main, argv)`: the tool's return value is its exit status. Expected bad input (`UsageError`) is one line on
  stderr naming the file, line, flag or key and what to do, exit status 2. An expected failure of the run itself
  (`RunFailure`, a full disk, a closed output pipe) is one line and exit status 1. Ctrl-C is exit status 130, SIGTERM
  143 and SIGHUP 129; the two signals interrupt as Ctrl-C does, so that the same cleanup runs. A refusal declared by a
  module that cannot import `vaswani_hf.errors` (a class attribute `exit_code`, read by `errors.refusal_exit_code`) is
  one line too. The operating system's conditions (no space left, permission denied, a symbolic-link loop, a read-only
  file system) and its limits (memory, open descriptors, file size) are mapped to one line that names the file, or the
  outputs the command declared when the system does not say which file. Anything else is a bug and keeps its traceback;
  `--debug` (or VASWANI_DEBUG=1) shows every traceback.
- While the tool runs, `run_cli` also guards it against the state of the process around it, using the module
  `surroundings`: it handles closed standard streams, rejects malformed launcher variables such as RANK=abc, and turns
  SIGTERM and SIGHUP into interruptions. It also refuses a relative path when the runner found the working folder
  deleted. What libraries report on their own (transformers' LOAD REPORT, its warnings) is held back and
  shown only when the tool succeeds or fails with a bug (`library_reports`), so that a refusal stays one line.
- `ArgumentParser`: argparse whose usage errors are `UsageError`s. Flags declare their constraints as argparse types
  (`vaswani_hf.settings.flag`, `device`), so that a bad value names its flag before any work, and `--help` states
  every flag's default (`HelpFormatter`).
- `declare_paths(inputs=..., outputs=...)` declares what a command reads and writes. It checks the paths with
  `vaswani_hf.io.check_paths`, which refuses an output that is, contains or lies inside an input, and remembers the
  outputs for the full-disk message above, for the running call only. `command.run_command` calls it with the paths a tool's declaration states.
"""

from __future__ import annotations

import argparse
import contextvars
import errno
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext, suppress
from pathlib import Path

from vaswani_commands import debug_requested, leave_an_unusable_working_folder, limit_problem, working_folder_problem

from .. import io
from ..errors import UsageError, as_typed, one_line, refusal_exit_code
from .library_reports import HeldReports, library_progress_bars_off, release_library_reports  # noqa: F401
from .surroundings import Terminated, check_distributed_environment, own_streams, process_rank, signals_as_interrupts

# "--flag path" of the running command's outputs, which an operating-system error message names: set by
# `declare_paths`, reset by `run_cli`.
_declared_outputs: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("declared_outputs", default=())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Format argparse's help keeping the description's line breaks, and add each flag's default.

    "(default: X)" is added after the help of every flag that takes a value and has a default its help does not
    already state. A flag without a default is expected to say in its help what leaving it out means.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        stated = "default" in help_text or action.default in (None, argparse.SUPPRESS) or action.nargs == 0
        return help_text if stated or action.required else f"{help_text} (default: %(default)s)"


class ArgumentParser(argparse.ArgumentParser):
    """Parse arguments as argparse does, but raise a `UsageError` for a usage error instead of printing and exiting.

    Through `run_cli` that error becomes one line. Every tool also gets `--debug`, and `--help` keeps the line breaks
    of the description (the tool's module docstring) and shows each flag's default (`HelpFormatter`).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault(
            "allow_abbrev", False
        )  # A prefix is not accepted as a flag, so that `--token X` cannot become `--tokenizer X`.
        super().__init__(*args, **kwargs)
        add_debug_argument(self)

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error (also: environment variable VASWANI_DEBUG=1)",
    )


def declare_paths(
    inputs: Mapping[str, str | os.PathLike | None],
    outputs: Mapping[str, str | os.PathLike | None],
    *,
    check: bool = True,
) -> None:
    """Declare a command's inputs and outputs by flag, check them with `io.check_paths`, and remember the outputs.

    The check runs before any work; `check=False` skips it where the caller has checked the paths already (a training
    run's plan, for example). When the disk fills, `run_cli`'s one-line message names the remembered outputs, because
    the system then names no file for the failed write, or names the file being copied from.
    """
    if check:
        io.check_paths(inputs, outputs)
    _declared_outputs.set(tuple(f"{flag} {path}" for flag, path in outputs.items() if path is not None))


# Maps what the operating system reports to (exit status, what it means, what to do).
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
    errno.ENOENT: (2, "no such file or folder (or it cannot be created there)", "check the path"),
}
# Libraries that write through their own code (Rust, C++) report a full disk in their message only.
_DISK_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "file write failed")


def expected_os_failure(error: BaseException) -> tuple[int, str] | None:
    """Return (exit status, one line) for an operating-system condition a user can act on, or None otherwise.

    None means the error is treated as a bug, which keeps its traceback.
    """
    if isinstance(error, BrokenPipeError) or getattr(error, "errno", None) == errno.EPIPE:
        return 1, "standard output was closed before all output was written (broken pipe)"
    if isinstance(error, OSError) and error.errno in OS_CONDITIONS and (error.errno != errno.ENOENT or error.filename):
        code, meaning, action = OS_CONDITIONS[error.errno]
        where = error.filename
        if error.errno in (errno.ENOSPC, errno.EDQUOT) and _declared_outputs.get():
            where = " and ".join(_declared_outputs.get())
        return code, f"{where}: {meaning}; {action}" if where else f"{meaning}; {action}"
    limit = limit_problem(
        error
    )  # Memory, descriptors and file size; the runner reports these limits the same way at import.
    if limit is not None:
        where = getattr(error, "filename", None) or " and ".join(_declared_outputs.get())
        return 1, f"{where}: {limit}" if where and "ulimit -f" in limit else limit
    if any(t in str(error).lower() for t in _DISK_FULL_TEXT):
        where = " and ".join(_declared_outputs.get()) or "an output"
        return (
            1,
            f"{where}: writing failed, no space left on device ({one_line(error, 160)}); free some space or "
            "write elsewhere",
        )
    return None


def run_cli(
    main: Callable[[list[str]], int | None], argv: Sequence[str] | None = None, prog: str | None = None
) -> int:
    """Run a tool's `main(argv)` under the contract the module docstring describes, and return its exit status.

    While the tool runs, this function also deals with the process around it (`surroundings`): it gives closed
    standard streams a harmless target, checks the variables that launchers such as torchrun set, turns SIGTERM and
    SIGHUP into a clean interruption, and refuses a relative path when the working folder has been deleted. The
    libraries' own log messages and warnings are held back until the tool can no longer refuse (`library_reports`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or Path(sys.argv[0]).name
    token = _declared_outputs.set(())
    left = io.UNUSABLE_WORKING_FOLDER.set(
        leave_an_unusable_working_folder()
    )  # Relative paths are refused from here on if the working folder is unusable.
    try:
        with own_streams(), signals_as_interrupts():
            return _run(main, argv, prog)
    finally:
        io.UNUSABLE_WORKING_FOLDER.reset(left)
        _declared_outputs.reset(token)


def _run(main: Callable[[list[str]], int | None], argv: list[str], prog: str) -> int:
    debug, held = (
        debug_requested(argv),
        HeldReports(),
    )  # With --debug nothing is held back and every error is let through.
    try:
        check_distributed_environment()
        with library_progress_bars_off(), nullcontext() if debug else held:
            code = main(argv)
            with suppress(ValueError, AttributeError):  # stdout is already closed, or None.
                # Flushed here so that a closed pipe is reported by the boundary, not at interpreter exit.
                sys.stdout.flush()
    except KeyboardInterrupt as error:
        if debug:
            raise
        held.discard()
        terminated = isinstance(error, Terminated)
        _report(f"{prog}: interrupted" + (f" by {error.name}" if terminated else ""))
        return error.exit_code if terminated else 130
    except Exception as error:  # An expected failure is one line; anything else is a bug and keeps its traceback.
        failure = expected_failure(error)
        if failure is None or debug:
            held.replay()
            if failure is not None:
                error.exit_status = failure[0]  # With --debug, the runner exits with this status after the traceback.
            raise
        held.discard()
        if isinstance(error, BrokenPipeError) or getattr(error, "errno", None) == errno.EPIPE:
            _silence_stdout()
        _report(f"{prog}: error: {failure[1]}")
        return failure[0]
    return 0 if code is None else int(code)


def expected_failure(error: BaseException) -> tuple[int, str] | None:
    """Return (exit status, one line) for an expected failure, or None for a bug, which keeps its traceback.

    Expected failures are a refusal (one `errors.refusal_exit_code` recognises: ours, or one that a module of this
    package declares), a working folder deleted while the tool ran, and an operating-system condition.
    """
    code = refusal_exit_code(error)
    if code is not None:
        return code, one_line(error)
    if isinstance(error, FileNotFoundError) and error.filename is None and working_folder_problem():
        return 2, working_folder_problem()
    return expected_os_failure(error)


# No credential may reach an error line, and argparse echoes an unrecognised `--token hf_...`. These patterns mask a
# Hugging Face token, a URL's user:password@ or ?token= part, and the value after a flag or header that names a
# secret (--token, --hub_token, --api_key and the like, or Authorization: Bearer).
_CREDENTIALS = (
    re.compile(
        r"\bhf_[A-Za-z0-9]{20,}|(?<=://)[^/\s@]+@|(?<=[?&])(?:\w*token|key|password|secret)=[^&\s]+", re.IGNORECASE
    ),
    re.compile(
        r"((?:--?(?:\w*[_-])?(?:token|password|passwd|secret|api[_-]?key|credentials?)\b['\"]?[\s=]+|"
        r"(?:authorization|bearer)\b['\"]?[\s=:]+['\"]?(?:bearer\s+)?)['\"]?)[^\s'\",;)]+",
        re.IGNORECASE,
    ),
)


def masked(line: str) -> str:
    """Return `line` with every value that looks like a credential replaced by ***."""
    return _CREDENTIALS[1].sub(r"\1***", _CREDENTIALS[0].sub("***", line))


def _report(line: str) -> None:
    """Print the one error line on stderr with any credentials in it masked, or drop it when stderr is closed.

    A file name in it that is not UTF-8 is written as the user types it in the shell (`errors.as_typed`), whatever
    stream stands in for stderr.

    Under a multi-process launcher every process refuses the same input in the same way, so only the first process
    (rank 0) prints the line, and the user reads it once.
    """
    stream = sys.stderr  # It is None when closed, and `print(file=None)` would write to standard output.
    if stream is not None and not getattr(stream, "closed", False) and process_rank() == 0:
        print(as_typed(masked(line)), file=stream)
        stream.flush()


def _silence_stdout() -> None:
    """Point standard output at /dev/null after a broken pipe, so that Python's final flush prints no second error."""
    with suppress(OSError, ValueError, AttributeError):  # stdout may not be a real file, as when tests capture it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
