"""Define the errors that every part of vaswani_hf raises for expected failures, and their exit statuses on the command
line.

Expected bad input is a `UsageError` (exit status 2): its message names the file (and line), the flag or the recipe key
at fault, and says what to do. An expected failure of the run itself, such as a network error, a full disk or a refused
upload, is a `RunFailure` (exit status 1). `vaswani_hf.cli.contract.run_cli` prints either as one line without a
traceback; any other exception is a bug and keeps its traceback.

Code that cannot import this module declares its refusals by a class attribute instead. The files copied next to the
weights import only torch and transformers, so their check of a setting raises `validation_vaswani.SettingError`, a
`ValueError` whose class sets `exit_code = 2`. `refusal_exit_code` is the one rule the command line applies: a
`VaswaniError`, or an exception whose class (or one of its bases) is defined in this package or in its remote-code
copies (`transformers_modules.*`) and sets `exit_code` to 1 or 2, is an expected failure with that exit status. A plain
ValueError or TypeError, or one that a library raises, is a bug and keeps its traceback.
"""

from __future__ import annotations

import os

STDIO = "-"  # the file name that means standard input or output on every command line


class VaswaniError(Exception):
    """Raised for an expected failure, which the command line reports as one line without a traceback."""

    exit_code = 1


class UsageError(VaswaniError, ValueError):
    """Raised for bad arguments or bad input (a file, a line, a key); the command line exits with status 2."""

    exit_code = 2


class RunFailure(VaswaniError, RuntimeError):
    """Raised when the run itself fails for an expected reason outside the input (the network, the disk, a refused
    upload); the command line exits with status 1."""


class InputLineError(UsageError):
    """Raised for bad input at one line (`line`, counted from 1) of a list of sentences where the file is not known,
    for example a sentence longer than the model's positions. A tool that read the sentences from a file names the
    file with `in_file`."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message

    def in_file(self, label: str | os.PathLike) -> UsageError:
        """Return the same error naming the file, as `file:line: ...`; "-" is named <stdin>."""
        label = "<stdin>" if str(label) == STDIO else str(label)
        return UsageError(f"{label}:{self.line}: {self.message}")


class StandardInputClosed(UsageError):
    """Raised when a tool reads from a standard input that the caller closed (`<&-`); that is bad input, exit status
    2."""

    def __init__(self):
        super().__init__(
            "standard input is closed (the command ran with <&-); give the input as a file, or pipe text into it"
        )


class StandardOutputClosed(RunFailure):
    """Raised when a tool writes to a standard output that the caller closed (`>&-`); the exit status is 1, as when a
    write to a closed pipe fails."""

    def __init__(self):
        super().__init__(
            "standard output is closed (the command ran with >&-); write the output to a file instead, "
            "or leave standard output open"
        )


# Classes of these modules may declare an `exit_code`: this package's, and its files loaded as remote code by
# transformers.
_OWN_MODULES = ("vaswani_hf", "transformers_modules")


def refusal_exit_code(error: BaseException) -> int | None:
    """Return the exit status of an expected failure, or None for a bug. An expected failure is a `VaswaniError`, or an
    exception whose class (or one of its bases) belongs to this package or its remote-code copies and sets
    `exit_code` to 1 or 2."""
    if isinstance(error, VaswaniError):
        return error.exit_code
    for cls in type(error).__mro__:
        if "exit_code" in vars(cls):
            code = vars(cls)["exit_code"]
            own = cls.__module__.split(".")[0] in _OWN_MODULES
            return code if own and isinstance(code, int) and code in (1, 2) else None
    return None


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """Return an error message on one line (each run of whitespace becomes one space) and cut to at most `limit`
    characters, so that a message quoting user input (a recipe value, a line of text) never floods the terminal."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 5] + " ..."
