"""Report progress the way every tool does, on standard error, with one decision and one form.

On a terminal the report is tqdm's bar. Anywhere else (a log file, a pipe, a batch scheduler's capture of standard
error) a bar's carriage-return updates would pile up in the log, so a progress report is plain lines, no carriage
return: one when the work has advanced by another PERCENT of its total, or when SECONDS have passed since the last line
(for work of unknown size, only the latter), and one at the end; never more often. Every tool's progress goes through
`progress_bar` (translate's windows, `inference.translate`'s sentences, the training loop through
`training.callbacks.TrainingProgress`), and `library_bars` turns the libraries' own bars (datasets, tokenizers) off
where they would write carriage returns."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

PERCENT = 5  # a plain progress line every 5% of the work at most ...
SECONDS = 60.0  # ... or after a minute without one


def interactive(stream: TextIO | None = None) -> bool:
    """Return whether `stream` (by default standard error) is a terminal, where a bar redraws itself in place, or
    whether this process is a Jupyter notebook's kernel, where tqdm draws a widget."""
    stream = sys.stderr if stream is None else stream
    if _notebook():
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # the stream is closed, or an object without isatty
        return False


def _notebook() -> bool:
    """Return whether this process is a Jupyter kernel, by tqdm.auto's own test: IPython's shell is a kernel's."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress:
    """Offer tqdm's interface as the package uses it (`update`, `n`, `total`, `write`, `close`, a context manager),
    and write the progress as plain lines (see the module docstring). `clock` is the time source, which a test may
    replace."""

    def __init__(
        self,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        *,
        file: TextIO | None = None,
        disable: bool = False,
        clock: Callable[[], float] = time.monotonic,
        **ignored: Any,  # tqdm's display options (dynamic_ncols, leave, ...), ignored because nothing is drawn
    ):
        self.total, self.desc, self.unit, self.disable = total, desc, unit, disable
        self.file, self.clock = file, clock
        self.n = 0
        self.started = self.last_time = clock()
        self.last_n = 0

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.disable or self.n == self.last_n:
            return
        now = self.clock()
        step = self.total * PERCENT / 100 if self.total else None
        crossed = step is not None and int(self.n / step) > int(self.last_n / step)
        if crossed or now - self.last_time >= SECONDS:
            self._line(now)

    def _line(self, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.n / elapsed
        parts = [f"{self.desc}: " if self.desc else "", f"{self.n:,}"]
        if self.total:
            parts.append(f"/{self.total:,} {_plural(self.unit)} ({100 * self.n / self.total:.0f}%)")
        else:
            parts.append(f" {_plural(self.unit)}")
        parts.append(f", {rate:,.1f} {_plural(self.unit)}/s, {_duration(elapsed)} elapsed")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f", {_duration((self.total - self.n) / rate)} left")
        self._print("".join(parts))
        self.last_time, self.last_n = now, self.n

    def _print(self, text: str) -> None:
        stream = sys.stderr if self.file is None else self.file
        if stream is not None:
            print(text, file=stream, flush=True)

    def write(self, text: str, file: TextIO | None = None) -> None:
        """Write `text` as a line of its own, by default on standard output as tqdm.write does (the training loop's
        log lines)."""
        stream = sys.stdout if file is None else file
        if stream is not None:
            print(text, file=stream, flush=True)

    def set_postfix_str(self, *args, **kwargs) -> None:
        """Accept tqdm's live suffix and ignore it, since nothing is redrawn here."""

    def close(self) -> None:
        if not self.disable and self.n != self.last_n:
            self._line(self.clock())
        self.disable = True


def _plural(unit: str) -> str:
    """Return the plural of a unit in a report line: "batch" gives "batches", "window" gives "windows"."""
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", *, disable: bool = False, **options):
    """Return the package's progress report on standard error: tqdm's bar on a terminal, and a `LineProgress`
    elsewhere."""
    if interactive():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=sys.stderr, dynamic_ncols=True, **options)
    return LineProgress(total, desc, unit, disable=disable)


def library_bars() -> bool:
    """Return whether the libraries' own progress bars may draw, which they may when standard error and standard
    output are both terminals (the tokenizers library's trainer ends each stage with a line on standard output).
    Otherwise datasets' bars are turned off for this process; the tokenizers library takes the value returned as its
    `show_progress`."""
    if interactive() and interactive(sys.stdout):
        return True
    import datasets

    datasets.disable_progress_bars()
    return False
