"""The errors of expected failures and their exit statuses: bad input is a `UsageError` (exit 2) naming the file,
line, flag or key and what to do; a failure of the run itself (network, disk) a `RunFailure` (exit 1). Anything else
is a bug and keeps its traceback. The Hub files import only torch and transformers, so they declare a refusal by a
class attribute (`exit_code = 2`): `refusal_exit_code` is the one rule the command line applies.
"""

from __future__ import annotations

import os

STDIO = "-"  # the file name of standard input / output on every command line


class VaswaniError(Exception):
    """An expected failure, reported as one line without a traceback by the command line."""

    exit_code = 1


class UsageError(VaswaniError, ValueError):
    """Bad arguments or bad input (a file, a line, a key): exit status 2."""

    exit_code = 2


class RunFailure(VaswaniError, RuntimeError):
    """The run itself failed for an expected reason outside the input (network, disk, a refused upload): exit 1."""


class InputLineError(UsageError):
    """Bad input at one line (1-based) of a list of sentences whose file is not known here: see `in_file`."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line, self.message = line, message

    def in_file(self, label: str | os.PathLike) -> UsageError:
        """The same error naming the file as `file:line: ...` ("-" is standard input)."""
        label = "<stdin>" if str(label) == STDIO else str(label)
        return UsageError(f"{label}:{self.line}: {self.message}")


class StandardInputClosed(UsageError):
    def __init__(self):
        super().__init__(
            "standard input is closed (the command ran with <&-); give the input as a file, or pipe text into it"
        )


class StandardOutputClosed(RunFailure):  # fails as a closed pipe does
    def __init__(self):
        super().__init__(
            "standard output is closed (the command ran with >&-); write the output to a file instead, "
            "or leave standard output open"
        )


# The modules whose classes may declare an `exit_code` (this package; its files as remote code under transformers).
_OWN_MODULES = ("vaswani_hf", "transformers_modules")


def refusal_exit_code(error: BaseException) -> int | None:
    """The exit status of an expected failure, or None (a bug): a `VaswaniError`, or an exception whose class (or a
    base) of this package or its remote-code copies sets `exit_code` to 1 or 2."""
    if isinstance(error, VaswaniError):
        return error.exit_code
    for cls in type(error).__mro__:
        if "exit_code" in vars(cls):
            code = vars(cls)["exit_code"]
            own = cls.__module__.split(".")[0] in _OWN_MODULES
            return code if own and isinstance(code, int) and code in (1, 2) else None
    return None


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """An error message on one line, at most `limit` characters: quoted user input never floods the terminal."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 5] + " ..."
