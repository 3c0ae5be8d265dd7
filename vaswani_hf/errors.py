"""The errors every part of vaswani_hf raises for expected failures, and their exit statuses on the command line.

Expected bad input is a `UsageError` (exit status 2): its message names the file (and line) or the flag or recipe key
at fault and says what to do. An expected failure of the run itself (network, a full disk, a refused upload) is a
`RunFailure` (exit status 1). `vaswani_hf.cli.contract.run_cli` prints either as one line without a traceback;
anything else is a bug and keeps its traceback.
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


def one_line(error: BaseException | str, limit: int = 400) -> str:
    """An error message on one line (whitespace runs become one space), at most `limit` characters: a message that
    quotes user input (a recipe value, a line of text) never floods the terminal."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 5] + " ..."


__all__ = ["STDIO", "VaswaniError", "UsageError", "RunFailure", "InputLineError", "one_line"]
