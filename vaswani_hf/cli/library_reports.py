"""Hold back what libraries report on their own while a tool runs, so that a refusal stays one line.

transformers, huggingface_hub, datasets, accelerate and evaluate report things as log records (transformers' LOAD
REPORT table of missing weights, its "Token indices sequence length is longer than the specified maximum" warning)
and as Python warnings.

`contract.run_cli`, which runs every tool and turns its expected errors into one line, holds them back
(`HeldReports`) while the tool runs. When the tool refuses its input
or fails for an expected reason, its one error line says what is wrong and what the libraries said is dropped: a table
in front of the line would break the one-line rule, and it describes what the line already names. When the tool
succeeds, or fails with a bug (a traceback), they are shown afterwards, in their order. `--debug` holds nothing back. A
tool whose work is long (a training run) releases them once its preparation is done (`release_library_reports`), so
that what libraries say while it trains is shown when it is said.

transformers' progress bars (loading and writing weights) are off while a tool runs (`library_progress_bars_off`),
because they are not the tool's progress.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
from transformers.utils import logging as transformers_logging

# The loggers of the libraries whose reports are held (each library logs under its package name).
LIBRARY_LOGGERS = ("transformers", "huggingface_hub", "datasets", "accelerate", "evaluate", "torch", "tokenizers")

_active: list[
    HeldReports
] = []  # The holds of the running tools, as a stack, because a tool may run another one in-process.


class HeldReports:
    """Hold the log records of `loggers` (and their children) and, with `hold_warnings`, Python's warnings.

    Holding starts with `start()` and lasts until `replay()` shows what was held, in order, or `discard()` drops it.
    `stop()` routes new records and warnings to their usual places again and keeps what was held. A tool may hold its
    own loggers' records the same way: train_tokenizer holds the corpus loader's warnings until the corpus is accepted.
    """

    def __init__(self, loggers: tuple[str, ...] = LIBRARY_LOGGERS, hold_warnings: bool = True):
        self.loggers, self.hold_warnings = loggers, hold_warnings
        self.records: list[logging.LogRecord] = []
        self.warnings: list[tuple] = []
        self._routes: dict[str, tuple[list, bool]] = {}
        self._showwarning = None
        self._handler = logging.Handler()
        self._handler.emit = self.records.append  # A record is held unchanged.

    def start(self) -> HeldReports:
        for name in self.loggers:
            logger = logging.getLogger(name)
            self._routes[name] = (logger.handlers[:], logger.propagate)
            logger.handlers, logger.propagate = [self._handler], False
        if self.hold_warnings:
            self._showwarning = warnings.showwarning
            warnings.showwarning = self._hold_warning
        _active.append(self)
        return self

    def _hold_warning(self, *args, **kwargs) -> None:
        self.warnings.append((args, kwargs))

    def stop(self) -> None:
        """Route records and warnings as they were routed before `start()`, keeping handlers a library added since."""
        for name, (handlers, propagate) in self._routes.items():
            logger = logging.getLogger(name)
            added = [h for h in logger.handlers if h is not self._handler and h not in handlers]
            logger.handlers, logger.propagate = handlers + added, propagate
        self._routes.clear()
        if self._showwarning is not None and warnings.showwarning == self._hold_warning:
            warnings.showwarning = self._showwarning
        if self in _active:
            _active.remove(self)

    def replay(self) -> None:
        """Stop holding, and show what was held in the order it came."""
        records, held_warnings = self.records[:], self.warnings[:]
        self.discard()
        for record in records:
            logging.getLogger(record.name).handle(record)
        for args, kwargs in held_warnings:
            (self._showwarning or warnings.showwarning)(*args, **kwargs)

    def discard(self) -> None:
        """Stop holding, and drop what was held."""
        self.stop()
        self.records.clear()
        self.warnings.clear()

    def __enter__(self) -> HeldReports:
        return self.start()

    def __exit__(self, kind, error, traceback) -> None:
        """Show what was held on success or SystemExit (as --help exits); after an exception, stop holding and keep it.

        After an exception the caller chooses whether to replay or discard what was held.
        """
        if kind is None or not issubclass(kind, (Exception, KeyboardInterrupt)):
            self.replay()
        else:
            self.stop()


def release_library_reports() -> None:
    """Show what the libraries said so far and stop holding it back.

    A tool whose preparation is done calls this before its long work (a training run), so that later reports appear
    when they are made.
    """
    for held in _active[::-1]:
        held.replay()


@contextmanager
def library_progress_bars_off():
    """Turn transformers' own progress bars (loading and writing weights) off while a tool runs.

    They are not the tool's progress, and a bar left on stderr before an error would break the one-line rule. The
    tools' own bars and huggingface_hub's download bars stay on. The previous state is restored afterwards, for
    in-process callers.
    """
    was_enabled, hub_was_disabled = transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()

    def switch(on: bool) -> None:  # transformers' switch also switches the hub's bars, so the hub's state is put back.
        with warnings.catch_warnings():  # The hub warns when HF_HUB_DISABLE_PROGRESS_BARS forbids a change.
            warnings.simplefilter("ignore")
            (transformers_logging.enable_progress_bar if on else transformers_logging.disable_progress_bar)()
            (disable_progress_bars if hub_was_disabled else enable_progress_bars)()

    switch(False)
    try:
        yield
    finally:
        switch(was_enabled)
