"""Read and write text files: this module is the one reader and writer of sentences, and of JSON.

Text is strict UTF-8: a bad byte is an error naming the file and line, never a silent replacement. A UTF-8 byte-order
mark at the start is dropped, and "\\r\\n" and a lone "\\r" end a line as "\\n" does (Python's universal newlines). The
Unicode separators U+2028 and U+0085, on which `str.splitlines` would also split, occur inside sentences and are text.
Each line is one item and empty lines are kept, so N lines give N items; a final newline adds no empty line. "-" names
standard input or output. Written files end every line with "\\n" and appear whole or not at all.

An input (`TextInput`) is a regular file, a pipe (`<(command)`, "-", a named pipe) or the null device (/dev/null, an
empty input as an empty file would be). Any other device, a socket or a folder is refused by name, because reading
/dev/zero or /dev/urandom would never end.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import STDIO, UsageError
from .outputs import check_output_file, file_kind, replace_atomically

BOM = "\ufeff"
# Text is decoded in 16 MiB blocks, so that decoding runs at C speed and in bounded memory even for WMT-sized corpora.
CHUNK_BYTES = 1 << 24


def check_input_file(path: str | os.PathLike, what: str = "input file") -> Path:
    """Return the path of an existing, readable regular file, pipe or null device, and otherwise raise a UsageError
    naming the path and saying what it is instead."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise UsageError(
            f"{what} not found: {p}" + (" (a symlink to a missing file)" if p.is_symlink() else "")
        ) from None
    except OSError as error:  # a symlink loop, a name too long, a folder without search permission
        raise UsageError(f"{what} {p}: {os.strerror(error.errno) if error.errno else error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {p} is a folder; give a file (one sentence per line)")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode) or is_null_device(info)):
        raise UsageError(
            f"{what} {p} is {file_kind(info.st_mode)}, not a text file; give a regular file "
            f"(or {STDIO} for standard input)"
        )
    if not os.access(p, os.R_OK):
        raise UsageError(f"{what} {p} is not readable; check its permissions")
    return p


def is_null_device(info: os.stat_result) -> bool:
    """Return whether `info` (a stat result) is that of the null device, which reads as empty."""
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and stat.S_ISCHR(null.st_mode) and info.st_rdev == null.st_rdev


def _decode(data: bytes, label: str, first_line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = first_line + before.count(b"\n") + before.replace(b"\r\n", b"\n").count(b"\r")
        column = error.start - max(before.rfind(b"\n"), before.rfind(b"\r")) - 1
        raise UsageError(
            f"{label}:{line}: not valid UTF-8 (byte 0x{data[error.start]:02x} at byte {column + 1} of the line); "
            "re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`"
        ) from None


def _split(text: str) -> list[str]:
    """Return the lines of `text`, split at universal newlines; a final line end adds no empty line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _lines_of(blocks: Iterable[bytes], label: str) -> Iterator[str]:
    """Yield the lines of a stream of byte blocks. Whole lines are decoded together (a "\\r\\n" split across blocks
    stays together), so that a bad byte is named by its line, and a line longer than a block is gathered without being
    copied again for every block."""
    pending, line_number, first = bytearray(), 1, True
    for block in blocks:
        cut = block.rfind(b"\n")
        if cut < 0:
            pending += block
            continue
        data = bytes(pending) + block[: cut + 1] if pending else block[: cut + 1]
        pending = bytearray(block[cut + 1 :])
        text = _decode(data, label, line_number)
        if first:
            text, first = text.removeprefix(BOM), False
        lines = _split(text)
        line_number += len(lines)
        yield from lines
    if pending:
        text = _decode(bytes(pending), label, line_number)
        yield from _split(text.removeprefix(BOM) if first else text)


SPOOL_SHARE = 0.9  # an input read only once is spooled into at most this share of the free space of TMPDIR's disk


def _input_stat(path: str | os.PathLike) -> os.stat_result | None:
    """Return the stat result of `path` ("-" meaning standard input), taken without opening it, because opening a
    named pipe waits for its writer. Return None where it cannot be taken: the path is absent, or standard input has
    no descriptor."""
    try:
        return os.fstat(sys.stdin.fileno()) if str(path) == STDIO else os.stat(path)
    except (AttributeError, OSError, ValueError):
        return None


def reads_once(path: str | os.PathLike) -> bool:
    """Return whether `path` ("-" meaning standard input) can be read only once, as a pipe (named, or a process
    substitution's /dev/fd/N), a terminal or a socket can; a regular file and the null device can be read again."""
    info = _input_stat(path)
    if info is None:
        # Standard input was replaced by an object without a descriptor: it reads once unless that object is seekable.
        return str(path) == STDIO and not getattr(getattr(sys.stdin, "buffer", None), "seekable", lambda: False)()
    return not (stat.S_ISREG(info.st_mode) or is_null_device(info))


def check_read_once(inputs: Iterable[tuple[str, str | os.PathLike]]) -> None:
    """Raise a UsageError if two of `inputs` ((what, path) pairs) name one input that can be read only once, such as
    "-" and /dev/stdin, or a named pipe given twice: the second reader would wait for text that the first took."""
    seen = {}
    for what, path in inputs:
        info = _input_stat(path)
        if info is None or not reads_once(path):
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            raise UsageError(
                f"{what} {path} and {seen[identity]} are the same pipe, which can be read only once; give the text "
                "as a file"
            )
        seen[identity] = f"{what} {path}"


class TextInput:
    """Read one text input the way every tool reads it: open it once, and read it in at most `passes` passes. The
    input may be a regular file, a named pipe, a process substitution (/dev/fd/N), /dev/stdin, "-" (standard input) or
    the null device.

    - A regular file (and standard input redirected from one) is read again from where it began, through the
      descriptor opened first: a file removed or replaced by another meanwhile is still read whole as it was; one
      changed in place (its size or modification time) is refused, naming it, at the end of a pass or before the next.
    - An input that can be read only once (a pipe, a terminal) is never opened twice: with `passes` > 1 its bytes are
      copied, as the first pass reads them, into a spool file in TMPDIR, bounded by SPOOL_SHARE of the free space
      there (more is refused in one line) and removed when the input is closed, at the latest when the process exits;
      later passes read the spool.
    """

    def __init__(self, path: str | os.PathLike, what: str = "input file", *, passes: int = 1):
        self.path, self.what, self.passes = path, what, passes
        self.label = "<stdin>" if str(path) == STDIO else str(path)
        self._handle = None
        self._own = False
        self.rereadable = False  # set by open(): true for a regular file, the null device or a seekable stream
        self._identity = None  # the (size, mtime) that a regular file had when it was opened
        self._start = 0
        self._passes_begun = 0
        self._spool: Path | None = None
        self._spooled = False  # becomes true once the spool holds the whole input
        self._cleanup = None

    def __enter__(self) -> TextInput:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        if str(self.path) == STDIO:
            self._handle = sys.stdin.buffer  # a closed standard input (cli.surroundings.ClosedInput) refuses here
        else:
            self._handle = open(check_input_file(self.path, self.what), "rb")  # noqa: SIM115 - closed by close()
            self._own = True
        # An in-memory standard input, as tests and embedding programs use, has no descriptor.
        try:
            info = os.fstat(self._handle.fileno())
        except (AttributeError, OSError, ValueError):
            info = None
        if info is not None and stat.S_ISREG(info.st_mode):
            self._identity = (info.st_size, info.st_mtime_ns)
        self.rereadable = self._handle.seekable() if info is None else not reads_once_info(info, self._handle)
        self._start = self._handle.tell() if self.rereadable else 0

    def close(self) -> None:
        if self._own and self._handle is not None:
            self._handle.close()
        self._handle = None
        if self._cleanup is not None:
            self._cleanup()  # removes the spool

    def lines(self) -> Iterator[str]:
        """Yield the lines of one pass over the input (see `iter_lines`); a pass more than `passes` is a
        RuntimeError."""
        if self._handle is None:
            raise RuntimeError(f"{self.label}: TextInput.lines() before open()")
        number = self._passes_begun
        if number >= self.passes:
            raise RuntimeError(f"{self.label} read {number + 1} times, declared {self.passes}")
        self._passes_begun += 1
        if number > 0 and not self.rereadable:
            if not self._spooled:
                raise RuntimeError(f"{self.label}: a second pass before the first was read to its end")
            with open(self._spool, "rb") as spool:
                yield from _lines_of(_blocks(spool), self.label)
            return
        if number > 0:
            self._check_unchanged()
            self._handle.seek(self._start)
        blocks = _blocks(self._handle)
        if self.passes > 1 and not self.rereadable:
            blocks = self._spooling(blocks)
        yield from _lines_of(blocks, self.label)
        self._check_unchanged()

    def _check_unchanged(self) -> None:
        if self._identity is None:
            return
        info = os.fstat(self._handle.fileno())
        if (info.st_size, info.st_mtime_ns) != self._identity:
            raise UsageError(
                f"{self.label}: the file changed while it was read (size {self._identity[0]} -> {info.st_size} "
                "bytes, or its modification time); give a file that nothing writes to meanwhile, e.g. a copy"
            )

    def _spooling(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        """Yield `blocks` unchanged while copying them into the spool file (see the class docstring); more bytes than
        the spool's bound raise a UsageError."""
        folder = Path(tempfile.mkdtemp(prefix="vaswani_spool_"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, folder, True)
        self._spool = folder / "input"
        bound, written = int(shutil.disk_usage(folder).free * SPOOL_SHARE), 0
        with open(self._spool, "wb") as spool:
            for block in blocks:
                written += len(block)
                if written > bound:
                    raise UsageError(
                        f"{self.label}: more than {bound:,} bytes, the bound of the copy kept of an input that can be "
                        f"read only once ({SPOOL_SHARE:.0%} of the space free in {folder.parent}); give a regular "
                        "file, or set TMPDIR to a folder on a larger disk"
                    )
                spool.write(block)
                yield block
        self._spooled = True


def reads_once_info(info: os.stat_result, handle) -> bool:
    """Return whether an open input can be read only once, as `reads_once` does for a path. `info` is the stat result
    of `handle`; the input can be read again if it is a regular file, the null device or a seekable stream."""
    if stat.S_ISREG(info.st_mode) or is_null_device(info):
        return False
    return not handle.seekable()


def _blocks(handle) -> Iterator[bytes]:
    """Yield the bytes of `handle` in blocks of at most CHUNK_BYTES. From a pipe each block is what the pipe holds at
    that moment (`read1`), so that lines are passed on as they come."""
    read = getattr(handle, "read1", handle.read)
    while block := read(CHUNK_BYTES):
        yield block


def iter_lines(path: str | os.PathLike, what: str = "input file") -> Iterator[str]:
    """Yield the lines of a UTF-8 text file ("-" meaning standard input) without their line ends, streamed in one pass
    through `TextInput`; the module docstring gives the rules. A missing, unreadable or non-UTF-8 file raises a
    UsageError naming the file (and the line)."""
    with TextInput(path, what) as text:
        yield from text.lines()


def read_lines(path: str | os.PathLike, what: str = "input file") -> list[str]:
    """Return the lines of a text file as a list (see `iter_lines`)."""
    return list(iter_lines(path, what))


def format_lines(lines: Iterable[str]) -> str:
    """Return the text that `write_lines` writes: one line per item, with the item's own line breaks (those the reader
    would split at) turned into spaces."""
    return "".join(" ".join(_split(str(line))) + "\n" for line in lines)


def write_lines(
    path: str | os.PathLike | None, lines: Iterable[str], *, overwrite: bool = False, what: str = "output file"
) -> None:
    """Write one line per item: "\\n" ends every line, and an item's own line breaks become spaces, so that N items
    give N lines. A `path` of None or "-" means standard output; a file is written atomically and, unless `overwrite`,
    must not exist yet (see `check_output_file`)."""
    text = format_lines(lines)
    if path is None or str(path) == STDIO:
        write_stdout(text)
        return
    target = check_output_file(path, overwrite=overwrite, what=what)
    with replace_atomically(target, overwrite=overwrite) as temporary:
        temporary.write_text(text, encoding="utf-8", newline="\n")


def write_stdout(text: str) -> None:
    """Write all of `text` to standard output as UTF-8, or raise a BrokenPipeError. A pipe whose reader closes during a
    large write takes part of it, and Python's text layer drops the rest silently, so the descriptor is written
    directly and every count is checked. A standard output that has no file descriptor (captured by a caller, say) is
    written as text."""
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = memoryview(text.encode("utf-8"))
    while data:
        written = os.write(fd, data[: 1 << 20])
        if written <= 0:
            raise BrokenPipeError(errno.EPIPE, "standard output closed")
        data = data[written:]


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Return a JSON file's content, or raise a UsageError naming the file, and the line and column of the problem."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {p}")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not UTF-8 text; the file is corrupt, write it again") from None
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{p}:{error.lineno}: invalid JSON ({error.msg} at column {error.colno}); "
            "the file is corrupt, write it again"
        ) from None
    except RecursionError:
        raise UsageError(f"{p}: JSON nested too deeply to read; the file is corrupt, write it again") from None


def write_json(path: str | os.PathLike, data: Any, *, overwrite: bool = True) -> None:
    """Write `data` to `path` atomically as UTF-8 JSON text made by `to_json`. The file belongs to the caller's own
    run, so an existing one is replaced, unless `overwrite` is False."""
    target = check_output_file(path, overwrite=overwrite, what="JSON file") if not overwrite else Path(path)
    with replace_atomically(target, overwrite=overwrite) as temporary:
        temporary.write_text(to_json(data) + "\n", encoding="utf-8")


def to_json(data: Any) -> str:
    """Return `data` as indented JSON text. Numbers from numpy or torch (anything with `.item()`) are written as
    numbers, and any other value JSON lacks, such as a path, as its string."""
    return json.dumps(data, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))
