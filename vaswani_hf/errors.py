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

import codecs
import os
import re

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


# A byte of a file name that is not UTF-8 reaches Python as a lone surrogate, U+DC80 to U+DCFF (PEP 383: os.fsdecode,
# sys.argv and os.listdir decode such names with the "surrogateescape" error handler).
_ESCAPED_BYTES = re.compile("[\udc80-\udcff]+")


def as_typed(text: str) -> str:
    """Return `text` with each run of file-name bytes that are not UTF-8 written in the shell's quoting `$'\\xHH'`.

    A file name given as bytes that are not UTF-8 (`corpus` + byte 0xFF + `.txt`) is held by Python as
    "corpus\\udcff.txt" (PEP 383). Printed as it is, it would show as `corpus\\udcff.txt` (Python's escape on standard
    error) or as a replacement character on a terminal; `corpus$'\\xff'.txt` is what the user types in bash, zsh or
    ksh to name that file, so the name can be copied back into a command line. GNU coreutils' diagnostics quote such
    names in the same way (their "shell-escape" quoting).
    """
    return _ESCAPED_BYTES.sub(lambda m: "$'" + "".join(f"\\x{ord(c) - 0xDC00:02x}" for c in m.group()) + "'", text)


def as_typed_errors(fallback: str) -> str:
    """Return the name of a codec error handler that writes file-name bytes that are not UTF-8 as `as_typed` does.

    Any other character the stream's encoding cannot write is left to the handler `fallback` (the stream's own:
    "strict" for standard output, "backslashreplace" for standard error). A stream reconfigured with this handler
    (`TextIOWrapper.reconfigure(errors=...)`) shows every such file name as typed, whoever prints it: our messages,
    the progress lines, a library's log.
    """
    name = f"vaswani_as_typed+{fallback}"
    try:
        codecs.lookup_error(name)
    except LookupError:
        otherwise = codecs.lookup_error(fallback)

        def handler(error: UnicodeError):
            if isinstance(error, UnicodeEncodeError):
                run = _ESCAPED_BYTES.match(error.object, error.start, error.end)
                if run:
                    return as_typed(run.group()), run.end()
            return otherwise(error)

        codecs.register_error(name, handler)
    return name
