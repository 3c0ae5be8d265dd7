"""The errors every part of vaswani_hf raises for expected failures, and their exit statuses on the command line.

Expected bad input is a `UsageError` (exit status 2): its message names the file (and line) or the flag or recipe key
at fault and says what to do. An expected failure of the run itself (network, a full disk, a refused upload) is a
`RunFailure` (exit status 1). `vaswani_hf.cli.contract.run_cli` prints either as one line without a traceback;
anything else is a bug and keeps its traceback.

Code that cannot import this module declares its refusals by a class attribute instead: the files copied to the Hub
(configuration_vaswani.py, generation_vaswani.py, ...) import only torch and transformers, so a settings check there
raises, e.g., `class VaswaniSettingsError(ValueError): exit_code = 2`. `refusal_exit_code` is the one rule the
boundary applies: a `VaswaniError`, or an exception whose class (or a base) defined in this package's modules (or in
their remote-code copies, `transformers_modules.*`) sets `exit_code` to 1 or 2, is an expected failure with that exit
status. A plain ValueError or TypeError, or one a library raises, is a bug: it keeps its traceback.
"""

from __future__ import annotations

import os

STDIO = "-"  # the file name of standard input / output on every command line


class VaswaniError(Exception):
    """An expected failure, reported as one line without a traceback by the command line."""

    exit_code = 1


class UsageError(VaswaniError, ValueError):
    """Bad arguments or bad input (a file, a line, a key): exit status 2. The message names what is at fault and
    says what to do."""

    exit_code = 2


class RunFailure(VaswaniError, RuntimeError):
    """The run itself failed for an expected reason outside the input (network, disk, a refused upload): exit 1."""

    exit_code = 1


class InputLineError(UsageError):
    """Bad input at one line of a list of sentences (1-based `line`), raised where the file is not known (e.g. a
    sentence longer than the model's positions); a tool that read the sentences from a file names it with
    `in_file`."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message

    def in_file(self, label: str | os.PathLike) -> UsageError:
        """The same error naming the file as `file:line: ...` ("-" is standard input)."""
        label = "<stdin>" if str(label) == STDIO else str(label)
        return UsageError(f"{label}:{self.line}: {self.message}")


class StandardStreamClosed(VaswaniError):
    """A tool read from a standard input, or wrote to a standard output, that the caller closed (`<&-`, `>&-`):
    `StandardInputClosed` is bad input (exit status 2), `StandardOutputClosed` fails like a closed pipe (exit
    status 1)."""

    stream, redirection, remedy = "a standard stream", "", ""

    def __init__(self):
        super().__init__(f"{self.stream} is closed (the command ran with {self.redirection}); {self.remedy}")


class StandardInputClosed(StandardStreamClosed, UsageError):
    stream, redirection, remedy = "standard input", "<&-", "give the input as a file, or pipe text into it"


class StandardOutputClosed(StandardStreamClosed, RunFailure):
    stream, redirection, remedy = ("standard output", ">&-",
                                   "write the output to a file instead, or leave standard output open")


# The modules whose classes may declare an `exit_code` (this package; its files as remote code under transformers).
_OWN_MODULES = ("vaswani_hf", "transformers_modules")


def refusal_exit_code(error: BaseException) -> int | None:
    """The exit status of an expected failure (see the module docstring), or None: a bug, which keeps its
    traceback."""
    if isinstance(error, VaswaniError):
        return error.exit_code
    for cls in type(error).__mro__:
        if "exit_code" in vars(cls):
            code = vars(cls)["exit_code"]
            own = cls.__module__.split(".")[0] in _OWN_MODULES
            return code if own and isinstance(code, int) and code in (1, 2) else None
    return None


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """An error message on one line (whitespace runs become one space), at most `limit` characters: a message that
    quotes user input (a recipe value, a line of text) never floods the terminal."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 5] + " ..."


__all__ = ["STDIO", "VaswaniError", "UsageError", "RunFailure", "InputLineError", "StandardStreamClosed",
           "StandardInputClosed", "StandardOutputClosed",
           "refusal_exit_code", "one_line"]
