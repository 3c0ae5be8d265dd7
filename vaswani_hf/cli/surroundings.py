"""The process's surroundings, which the command-line boundary (`contract.run_cli`) owns before a tool runs.

- Standard streams. A stream the caller closed (`<&-`, `>&-`, `2>&-`) is None in Python (`sys.stdin`), and its
  descriptor number is free: the next file opened would get it, and whatever writes to descriptor 1 or 2 below Python
  (a library's C++ message, a child process) would write into that file. `prepare_process` (at package import) puts
  /dev/null on each closed descriptor; `own_streams` gives the tool a closed standard input that refuses in one line
  when read (exit status 2: bad input), a closed standard output that refuses when written (exit status 1, as a
  closed pipe), and a closed standard error that swallows what is written to it (the exit status still tells).
- The working folder. When it was deleted, relative paths cannot be resolved, and torch and transformers fail while
  they are imported: a command says so in one line (exit status 2) before it imports them (`prepare_process`, at the
  package's import) and again before it runs (`check_working_folder`, for callers in a process).
- Distributed variables (`RANK`, `WORLD_SIZE`, ...; `distributed_variables` declares each once, with its range) are
  read by torch and accelerate with `int()` deep inside a launch: a malformed one is one line naming it, exit 2,
  before any of them reads it.
- Signals. SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) raise `Terminated`, a KeyboardInterrupt, where
  the program is, so that every cleanup a Ctrl-C runs (a staged output folder removed, a lock released) runs too; the
  exit status is 128 + the signal's number (143 for SIGTERM, 129 for SIGHUP), as the shell reports a process the
  signal ended. A second signal while that cleanup runs is ignored, so that it completes; a signal the caller ignores
  (`nohup`) stays ignored.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

from ..errors import StandardInputClosed, StandardOutputClosed, UsageError

# (descriptor, attribute of sys, how a message calls it, how /dev/null is opened in its place)
STREAMS = ((0, "stdin", "standard input", os.O_RDONLY), (1, "stdout", "standard output", os.O_WRONLY),
           (2, "stderr", "standard error", os.O_WRONLY))


def distributed_variables() -> dict:
    """{name: Setting} of the launchers' variables (torchrun, accelerate launch): each a whole number, its range and
    what it is. Built when a command checks them (`check_distributed_environment`), by then with the package: the
    declarations' module loads transformers, which this module must not load before `prepare_process` has run."""
    from ..configuration_vaswani import Setting  # not at import: see above (the package's import runs this module)

    return {s.name: s for s in (
        Setting("RANK", int, help="this process's rank among all processes", min=0),
        Setting("WORLD_SIZE", int, help="the number of processes", min=1),
        Setting("LOCAL_RANK", int, help="this process's rank on its machine", min=0),
        Setting("LOCAL_WORLD_SIZE", int, help="the number of processes on this machine", min=1),
        Setting("GROUP_RANK", int, help="this machine's rank", min=0),
        Setting("NODE_RANK", int, help="this machine's rank", min=0),
        Setting("MASTER_PORT", int, help="the port of the first process's rendezvous", min=1, max=65535),
    )}


RANK_BELOW = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"))  # a rank lies below its count


# ---------------------------------------------------------------------------------------------------------------------
# Standard streams
# ---------------------------------------------------------------------------------------------------------------------


def occupy_closed_descriptors() -> None:
    """/dev/null on each standard descriptor (0, 1, 2) that is closed, so that no file opened later takes its
    number. Python's `sys.stdin` ... stay as they are (None): `own_streams` handles them."""
    for fd, _, _, mode in STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)  # the lowest free number: `fd` itself unless a lower one is free too
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            else:
                os.set_inheritable(fd, True)


class ClosedInput(io.TextIOBase):
    """`sys.stdin` of a process started with `<&-`: reading it is a `StandardInputClosed` (exit status 2)."""

    encoding = "utf-8"

    def _refuse(self, *args, **kwargs):
        raise StandardInputClosed()

    read = readline = readlines = _refuse
    buffer = property(_refuse)

    def readable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("standard input is closed")

    def __next__(self):
        self._refuse()


class ClosedOutput(io.TextIOBase):
    """`sys.stdout` of a process started with `>&-`: writing to it is a `StandardOutputClosed` (exit status 1, as
    for a closed pipe); flushing nothing is fine."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise StandardOutputClosed()

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        raise io.UnsupportedOperation("standard output is closed")


@contextmanager
def own_streams():
    """While a tool runs: a closed standard input or output refuses in one line, a closed standard error swallows
    (see the module docstring); the previous objects are put back afterwards."""
    occupy_closed_descriptors()
    replaced = {}
    for _, name, _, _ in STREAMS:
        if getattr(sys, name) is None:
            replaced[name] = {"stdin": ClosedInput, "stdout": ClosedOutput}.get(name, _sink)()
            setattr(sys, name, replaced[name])
    try:
        yield
    finally:
        for name, stand_in in replaced.items():
            if getattr(sys, name) is stand_in:
                setattr(sys, name, None)


_sinks: list = []


def _sink():
    """/dev/null as a text stream, opened once: a handler that a library bound to it meanwhile may still write."""
    if not _sinks:
        _sinks.append(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - kept open for the process
    return _sinks[0]


def stderr_or_none():
    """`sys.stderr` when it can be written to, else None (a message is then dropped: `print(file=None)` would write
    it to standard output)."""
    return sys.stderr if sys.stderr is not None and not getattr(sys.stderr, "closed", False) else None


# ---------------------------------------------------------------------------------------------------------------------
# The working folder
# ---------------------------------------------------------------------------------------------------------------------


def working_folder_problem() -> str | None:
    """What is wrong with the working folder (deleted, or not readable), as a message, or None."""
    try:
        os.getcwd()
        return None
    except FileNotFoundError:
        where = os.environ.get("PWD")
        return (f"the working folder {where + ' ' if where else ''}no longer exists (it was deleted or moved), so "
                "relative paths cannot be resolved; cd into an existing folder and run the command again")
    except OSError as error:
        return (f"the working folder cannot be determined ({os.strerror(error.errno) if error.errno else error}); "
                "cd into a folder you may read and run the command again")


def check_working_folder() -> None:
    problem = working_folder_problem()
    if problem:
        raise UsageError(problem)


def command_name() -> str | None:
    """The name of the vaswani-* command this process runs (console script, scripts/<tool>.py, or
    `python -m vaswani_hf.cli.<tool>`), or None when the package is imported by another program."""
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":  # `python -m module` while the module is located: the module's name is in the original argv
        original = list(getattr(sys, "orig_argv", []))
        module = original[original.index("-m") + 1] if "-m" in original[:-1] else ""
        tool = module.removeprefix("vaswani_hf.cli.")
        return f"vaswani-{tool.replace('_', '-')}" if tool != module else None
    path = Path(argv0)
    if path.name.startswith("vaswani-"):
        return path.name
    if path.suffix == ".py" and path.parent.name == "scripts" and (path.parent.parent / "vaswani_hf").is_dir():
        return path.name
    return None


def prepare_process() -> None:
    """At the package's import, before torch and transformers are imported: the closed standard descriptors
    occupied; a command whose working folder is gone stops with one line, exit status 2 (importing torch would fail
    with a traceback). A program that imports the package is left to its own devices."""
    occupy_closed_descriptors()
    problem = working_folder_problem()
    name = command_name() if problem else None
    if problem and name:
        stream = stderr_or_none()
        if stream is not None:
            print(f"{name}: error: {problem}", file=stream)
        raise SystemExit(2)


# ---------------------------------------------------------------------------------------------------------------------
# Distributed variables
# ---------------------------------------------------------------------------------------------------------------------


def _whole_number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def check_distributed_environment(environ: Mapping[str, str] | None = None) -> None:
    """UsageError naming the first launcher variable (`distributed_variables`) that is set but no whole number in its
    range, or a rank not below its count."""
    environ = os.environ if environ is None else environ
    values = {}
    for name, declared in distributed_variables().items():
        if name not in environ:
            continue
        text = environ[name]
        value = _whole_number(text)
        if value is None or declared.problem(value):
            bounds = f"from {declared.min} to {declared.max}" if declared.max is not None else f">= {declared.min}"
            raise UsageError(f"environment variable {name}={text[:40]!r} is not a whole number {bounds} "
                             f"({declared.help}, set by a launcher such as torchrun or accelerate launch); fix or "
                             "unset it")
        values[name] = value
    for rank, count in RANK_BELOW:
        if rank in values and count in values and values[rank] >= values[count]:
            raise UsageError(f"environment variable {rank}={values[rank]} is not below {count}={values[count]}; "
                             "fix or unset them (a launcher sets both)")


def process_rank() -> int:
    """This process's rank (`RANK`); 0 when it is unset, or when the launchers' variables are malformed (then every
    process says so: the error reporter must neither fail on them nor trust them)."""
    try:
        check_distributed_environment()
    except UsageError:
        return 0
    return _whole_number(os.environ.get("RANK", "0")) or 0


# ---------------------------------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the program is (see the module docstring)."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_wakeups: list[tuple[int, list]] = []  # (read end of the wakeup pipe, the signals received) of the running tool


@contextmanager
def signals_as_interrupts(signals=STOP_SIGNALS):
    """While a tool runs, `signals` raise `Terminated` (in the main thread; elsewhere Python cannot install
    handlers, and nothing changes). The previous handlers are put back afterwards.

    Python runs a signal's handler in the main thread, when that thread next runs Python code: a library that works
    in its own threads (the tokenizers library trains a BPE while its threads pull our lines) would finish its work
    first. So the signal's number is also written to a pipe (`signal.set_wakeup_fd`), which `raise_if_stopped`
    reads from any thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum, frame):
        if received:  # already stopping: let the cleanup finish
            return
        received.append(signum)
        raise Terminated(signum)

    previous = {}
    for number in signals:
        current = signal.getsignal(number)
        if current is not signal.SIG_IGN:
            previous[number] = current
            signal.signal(number, handler)
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    _wakeups.append((read_end, received))
    try:
        yield
    finally:
        _wakeups.remove((read_end, received))
        signal.set_wakeup_fd(previous_wakeup)
        os.close(read_end)
        os.close(write_end)
        for number, current in previous.items():
            signal.signal(number, current)


def raise_if_stopped() -> None:
    """Raise `Terminated` if SIGTERM or SIGHUP arrived and nothing raised it yet: for loops that may run outside the
    main thread (see `signals_as_interrupts`). Cheap (one non-blocking read); does nothing outside a tool."""
    if not _wakeups:
        return
    read_end, received = _wakeups[-1]
    try:
        numbers = os.read(read_end, 256)
    except OSError:  # nothing arrived (EAGAIN), or the tool just ended
        return
    for number in numbers:
        if number in STOP_SIGNALS and not received:
            received.append(number)
            raise Terminated(number)


__all__ = ["distributed_variables", "ClosedInput", "ClosedOutput", "Terminated", "check_distributed_environment",
           "check_working_folder", "command_name", "occupy_closed_descriptors", "own_streams", "prepare_process",
           "process_rank", "raise_if_stopped", "signals_as_interrupts", "stderr_or_none", "working_folder_problem"]
