"""The process's surroundings, which the command-line boundary (`contract.run_cli`) owns before a tool runs.

- Standard streams. A stream the caller closed (`<&-`, `>&-`, `2>&-`) is None in Python (`sys.stdin`), and its
  descriptor number is free: the commands' runner (vaswani_commands, before the package is imported) and
  `own_streams` put /dev/null on it; `own_streams` gives the tool a closed standard input that refuses in one line
  when read (exit status 2: bad input), a closed standard output that refuses when written (exit status 1, as a
  closed pipe), and a closed standard error that swallows what is written to it (the exit status still tells).
- The working folder. When it was deleted, relative paths cannot be resolved: the runner says so in one line (exit
  status 2) before torch is imported (which fails then), `check_working_folder` again before the tool runs.
- Distributed variables (`RANK`, `WORLD_SIZE`, ...; `DISTRIBUTED_VARIABLES` declares each once, with its range) are
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

from vaswani_commands import occupy_closed_descriptors, working_folder_problem

from ..configuration_vaswani import Setting
from ..errors import StandardInputClosed, StandardOutputClosed, UsageError

STREAMS = ("stdin", "stdout", "stderr")


# The launchers' variables (torchrun, accelerate launch): each a whole number, its range and what it is.
DISTRIBUTED_VARIABLES = {s.name: s for s in (
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


class ClosedInput(io.TextIOBase):
    """`sys.stdin` of a process started with `<&-`: reading it is a `StandardInputClosed` (exit status 2)."""

    encoding = "utf-8"

    def _refuse(self, *args, **kwargs):
        raise StandardInputClosed()

    read = readline = readlines = _refuse
    buffer = property(_refuse)

    def readable(self) -> bool:
        return True

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

    def writable(self) -> bool:
        return True

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
    for name in STREAMS:
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


def check_working_folder() -> None:
    problem = working_folder_problem()
    if problem:
        raise UsageError(problem)


# ---------------------------------------------------------------------------------------------------------------------
# Distributed variables
# ---------------------------------------------------------------------------------------------------------------------


def _whole_number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def check_distributed_environment(environ: Mapping[str, str] | None = None) -> None:
    """UsageError naming the first launcher variable (`DISTRIBUTED_VARIABLES`) that is set but no whole number in its
    range, or a rank not below its count."""
    environ = os.environ if environ is None else environ
    values = {}
    for name, declared in DISTRIBUTED_VARIABLES.items():
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


__all__ = ["DISTRIBUTED_VARIABLES", "ClosedInput", "ClosedOutput", "Terminated", "check_distributed_environment",
           "check_working_folder", "occupy_closed_descriptors", "own_streams", "process_rank", "raise_if_stopped",
           "signals_as_interrupts", "stderr_or_none", "working_folder_problem"]
