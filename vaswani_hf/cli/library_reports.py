"""What libraries (transformers, huggingface_hub, datasets, ...) report on their own while a tool runs: log records
such as transformers' LOAD REPORT table, and Python warnings.

The boundary (`contract.run_cli`) holds them back (`HeldReports`): when the tool refuses or fails for an expected
reason, its one error line is all (a table in front of it would break the one-line rule); when it succeeds or fails
with a bug, they are shown afterwards, in order. `--debug` holds nothing. A long tool (training) releases them once
its preparation is done (`release_library_reports`). transformers' progress bars are off while a tool runs.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
from transformers.utils import logging as transformers_logging

# The loggers of the libraries whose reports are held (each library logs under its package name).
LIBRARY_LOGGERS = ("transformers", "huggingface_hub", "datasets", "accelerate", "evaluate", "torch", "tokenizers")

_active: list[HeldReports] = []  # the hold of the running tool (a stack: a tool may run another in-process)


class HeldReports:
    """Hold the records of `loggers` (and, with `hold_warnings`, Python's warnings) from `start()` until `replay()`
    (show them, in order) or `discard()`; `stop()` routes new ones as before and keeps what was held."""

    def __init__(self, loggers: tuple[str, ...] = LIBRARY_LOGGERS, hold_warnings: bool = True):
        self.loggers, self.hold_warnings = loggers, hold_warnings
        self.records: list[logging.LogRecord] = []
        self.warnings: list[tuple] = []
        self._routes: dict[str, tuple[list, bool]] = {}
        self._showwarning = None
        self._handler = logging.Handler()
        self._handler.emit = self.records.append  # a record is held as it is

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
        """Route records and warnings as before `start()` (handlers a library added meanwhile are kept)."""
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
        """Stop holding, and show what was held, in order."""
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
        """Success (or SystemExit: --help) shows what was held; after an exception the caller chooses."""
        if kind is None or not issubclass(kind, (Exception, KeyboardInterrupt)):
            self.replay()
        else:
            self.stop()


def release_library_reports() -> None:
    """Show what the libraries said so far and stop holding (before a tool's long work)."""
    for held in _active[::-1]:
        held.replay()


@contextmanager
def library_progress_bars_off():
    """transformers' own progress bars (loading, writing weights) off: not the tool's progress, and a bar before an
    error line breaks the one-line rule. huggingface_hub's download bars stay; the state is restored afterwards."""
    was_enabled, hub_was_disabled = transformers_logging.is_progress_bar_enabled(), are_progress_bars_disabled()

    def switch(on: bool) -> None:  # transformers' switch also switches the hub's bars: the hub's state is put back
        with warnings.catch_warnings():  # the hub warns when HF_HUB_DISABLE_PROGRESS_BARS forbids a change
            warnings.simplefilter("ignore")
            (transformers_logging.enable_progress_bar if on else transformers_logging.disable_progress_bar)()
            (disable_progress_bars if hub_was_disabled else enable_progress_bars)()

    switch(False)
    try:
        yield
    finally:
        switch(was_enabled)
