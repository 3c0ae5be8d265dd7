"""Protect a running tool from the state of the process around it; `contract.run_cli` uses this module.

It handles three things that the caller or the system controls, not the tool.

- Standard streams. A stream the caller closed (`<&-`, `>&-`, `2>&-`) is None in Python (`sys.stdin`), and its
  descriptor number is free: the next file opened would take it, and whatever writes to descriptor 1 or 2 below Python
  (a library's C++ message, a child process) would then write into that file. The runner
  (`vaswani_commands.occupy_closed_descriptors`) puts /dev/null on each closed descriptor before the package is
  imported, and `own_streams` does it again for callers in a process. `own_streams` also gives the tool stand-ins for
  the closed Python streams: a closed standard input refuses in one line when it is read (exit status 2, bad input), a
  closed standard output refuses when it is written (exit status 1, as a closed pipe fails), and a closed standard
  error swallows what is written to it (the exit status still tells the caller what happened).
- File names that are not UTF-8. Python holds each byte of a file name that is not UTF-8 as a lone surrogate (PEP
  383), which standard output cannot write (a traceback) and standard error writes as `\\udcff`. `own_streams` gives
  both streams the error handler `errors.as_typed_errors`, which writes such a name as the user types it in the shell
  (`corpus$'\\xff'.txt`), whoever prints it.
- Launcher variables (`RANK`, `WORLD_SIZE` and the like, each declared once with its range in
  `DISTRIBUTED_VARIABLES`). torch and accelerate read them with `int()` deep inside a launch, where a malformed one
  ends in a traceback. `check_distributed_environment` makes that one line naming the variable, with exit status 2,
  before either library reads it.
- Signals. SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) raise `Terminated`, a KeyboardInterrupt, wherever
  the program is, so that every cleanup a Ctrl-C runs (a staged output removed, a lock released) runs for them too. The
  exit status is 128 + the signal's number (143 for SIGTERM, 129 for SIGHUP), as the shell reports a process that the
  signal ended. A second signal while that cleanup runs is ignored, so that the cleanup completes; a signal the caller
  ignores (`nohup`) stays ignored.
"""

from __future__ import annotations

import functools
import io
import os
import signal
import sys
import threading
from collections.abc import Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from vaswani_commands import occupy_closed_descriptors

from ..errors import StandardInputClosed, StandardOutputClosed, UsageError, as_typed_errors
from ..settings import settings_of

STREAMS = ("stdin", "stdout", "stderr")


@dataclass
class LauncherVariables:
    """Declare the variables the launchers set (torchrun, accelerate launch), each a whole number with its range."""

    RANK: int = field(default=0, metadata={"help": "this process's rank among all processes", "min": 0})
    WORLD_SIZE: int = field(default=1, metadata={"help": "the number of processes", "min": 1})
    LOCAL_RANK: int = field(default=0, metadata={"help": "this process's rank on its machine", "min": 0})
    LOCAL_WORLD_SIZE: int = field(default=1, metadata={"help": "the number of processes on this machine", "min": 1})
    GROUP_RANK: int = field(default=0, metadata={"help": "this machine's rank", "min": 0})
    NODE_RANK: int = field(default=0, metadata={"help": "this machine's rank", "min": 0})
    MASTER_PORT: int = field(
        default=29500, metadata={"help": "the port of the first process's rendezvous", "min": 1, "max": 65535}
    )


DISTRIBUTED_VARIABLES = settings_of(LauncherVariables)
RANK_BELOW = (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE"))  # Each rank must lie below its count.


class ClosedInput(io.TextIOBase):
    """Stand in for `sys.stdin` of a process started with `<&-`, raising `StandardInputClosed` when read.

    The exit status is then 2, as for bad input.
    """

    encoding = "utf-8"

    def _refuse(self, *args, **kwargs):
        raise StandardInputClosed()

    read = readline = readlines = __next__ = _refuse
    buffer = property(_refuse)

    def readable(self) -> bool:
        return True


class ClosedOutput(io.TextIOBase):
    """Stand in for `sys.stdout` of a process started with `>&-`, raising `StandardOutputClosed` when written to.

    The exit status is then 1, as for a closed pipe. Writing an empty string, as a flush does, is accepted.
    """

    encoding = "utf-8"

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise StandardOutputClosed()

    def writable(self) -> bool:
        return True


@contextmanager
def own_streams():
    """Give a closed standard stream a stand-in while a tool runs, as the module docstring describes.

    A closed standard input or output then refuses in one line, and a closed standard error swallows what is written
    to it. Standard output and error write a file name that is not UTF-8 as it is typed (`errors.as_typed_errors`).
    The previous objects (None) and error handlers are put back afterwards, so that an in-process caller finds `sys`
    as it left it.
    """
    occupy_closed_descriptors()
    replaced = {}
    for name in STREAMS:
        if getattr(sys, name) is None:
            replaced[name] = {"stdin": ClosedInput, "stdout": ClosedOutput}.get(name, _sink)()
            setattr(sys, name, replaced[name])
    handlers = {stream: _write_as_typed(stream) for stream in (sys.stdout, sys.stderr)}
    try:
        yield
    finally:
        for stream, previous in handlers.items():
            if previous is not None:
                with suppress(ValueError, OSError):  # The stream was closed meanwhile.
                    stream.reconfigure(errors=previous)
        for name, stand_in in replaced.items():
            if getattr(sys, name) is stand_in:
                setattr(sys, name, None)


def _write_as_typed(stream) -> str | None:
    """Give a text stream the error handler that writes file names as typed, and return its previous handler.

    None means the stream keeps its handler: it is no `io.TextIOWrapper` (a stand-in, or a caller's own object) or it
    already has this handler.
    """
    previous = getattr(stream, "errors", None)
    if not isinstance(stream, io.TextIOWrapper) or not isinstance(previous, str) or "vaswani_as_typed" in previous:
        return None
    try:
        stream.reconfigure(errors=as_typed_errors(previous))
    except (ValueError, OSError, LookupError):  # A closed stream, or a handler that codecs does not know.
        return None
    return previous


@functools.cache
def _sink():
    """Return /dev/null as a text stream, opened once and never closed.

    It stays open because a handler that a library bound to it meanwhile may still write to it.
    """
    return open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - it stays open for the process's life.


def _whole_number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


def check_distributed_environment(environ: Mapping[str, str] | None = None) -> None:
    """Check the launchers' variables (`DISTRIBUTED_VARIABLES`) and raise a UsageError naming the first bad one.

    A variable is bad when it is set but is not a whole number in its range, or when it is a rank not below its count.
    """
    environ = os.environ if environ is None else environ
    values = {}
    for name, declared in DISTRIBUTED_VARIABLES.items():
        if name not in environ:
            continue
        text = environ[name]
        value = _whole_number(text)
        if value is None or declared.problem(value):
            bounds = f"from {declared.min} to {declared.max}" if declared.max is not None else f">= {declared.min}"
            raise UsageError(
                f"environment variable {name}={text[:40]!r} is not a whole number {bounds} "
                f"({declared.help}, set by a launcher such as torchrun or accelerate launch); fix or "
                "unset it"
            )
        values[name] = value
    for rank, count in RANK_BELOW:
        if rank in values and count in values and values[rank] >= values[count]:
            raise UsageError(
                f"environment variable {rank}={values[rank]} is not below {count}={values[count]}; "
                "fix or unset them (a launcher sets both)"
            )


def process_rank() -> int:
    """Return this process's rank (`RANK`), or 0 when it is unset or the launchers' variables are malformed.

    Returning 0 for malformed variables makes every process report them, since no process can trust its rank then.
    """
    try:
        check_distributed_environment()
    except UsageError:
        return 0
    return _whole_number(os.environ.get("RANK", "0")) or 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Signal that SIGTERM or SIGHUP arrived; it is raised wherever the program is (see the module docstring)."""

    def __init__(self, signum: int):
        self.signum, self.name = int(signum), signal.Signals(signum).name
        self.exit_code = 128 + self.signum  # This is how the shell reports a process the signal ended.
        super().__init__(self.name)


_wakeups: list[
    tuple[int, list]
] = []  # For each running tool, the read end of its wakeup pipe and the signals it received.


@contextmanager
def signals_as_interrupts(signals=STOP_SIGNALS):
    """Make `signals` raise `Terminated` while a tool runs, and put the previous handlers back afterwards.

    Only the main thread can install handlers in Python, so in any other thread nothing changes. A signal the caller
    ignores stays ignored.

    Python runs a signal's handler in the main thread, when that thread next runs Python code, so a library that works
    in its own threads (the tokenizers library trains a BPE while its threads pull our lines) would finish its whole
    work first. The signal's number is also written to a pipe (`signal.set_wakeup_fd`), which `raise_if_stopped` reads
    from any thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum, frame):
        if received:  # Already stopping, so let the cleanup finish.
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
    """Raise `Terminated` if SIGTERM or SIGHUP arrived and nothing has raised it yet.

    This is for loops that may run outside the main thread, where no signal handler runs (see `signals_as_interrupts`).
    It is cheap (one non-blocking read of the wakeup pipe) and does nothing outside a tool.
    """
    if not _wakeups:
        return
    read_end, received = _wakeups[-1]
    try:
        numbers = os.read(read_end, 256)
    except OSError:  # Nothing arrived (EAGAIN), or the tool just ended.
        return
    for number in numbers:
        if number in STOP_SIGNALS and not received:
            received.append(number)
            raise Terminated(number)
