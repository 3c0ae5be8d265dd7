"""Call into a library written in Rust (the tokenizers library) so that a panic there is refused like any bad input.

A Rust library bound with PyO3 turns a panic into `pyo3_runtime.PanicException`, which derives from BaseException,
not Exception: an `except Exception` lets it through as a traceback. Before the exception reaches Python, Rust's panic
hook has already written "thread '...' panicked at ..." (and, with RUST_BACKTRACE set, a backtrace) straight to
descriptor 2, below Python's `sys.stderr`, so that even a caught panic would leave lines in front of the one error
line. `rust_call` runs one call with descriptor 2 redirected to a temporary file, and writes what the call printed back
to standard error unless the call panicked.

The tokenizers library panics where its regular-expression engine (Oniguruma) gives up on a pattern that backtracks
without end: `Regex search error: retry-limit-in-match over`, raised by an `unwrap` while a normalizer or
pre-tokenizer searches a sentence.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")


class RustPanic(Exception):
    """Raised by `rust_call` for a panic of the Rust library; `message` is the panic's own message."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def is_rust_panic(error: BaseException) -> bool:
    """Return whether `error` is PyO3's `pyo3_runtime.PanicException`, recognised by its class's module and name,
    because PyO3 creates that class at run time and no module exports it to import."""
    return any(cls.__module__ == "pyo3_runtime" and cls.__name__ == "PanicException" for cls in type(error).__mro__)


def rust_call(call: Callable[[], T]) -> T:
    """Return `call()`, or raise `RustPanic` if the Rust library panicked in it, with the panic's report to
    descriptor 2 kept off the terminal (see the module docstring). Any other exception passes unchanged."""
    with suppress(AttributeError, ValueError, OSError):  # sys.stderr may be None, closed, or no file.
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # Descriptor 2 is closed: nothing can be printed in front of the line anyway.
        saved = None
    with tempfile.TemporaryFile() as held:
        if saved is not None:
            os.dup2(held.fileno(), 2)
        panicked = False
        try:
            return call()
        except BaseException as error:
            if not is_rust_panic(error):
                raise
            panicked = True
            raise RustPanic(str(error)) from None
        finally:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
                if not panicked:  # What the call printed, shown after all.
                    held.seek(0)
                    printed = held.read()
                    if printed:
                        os.write(2, printed)
