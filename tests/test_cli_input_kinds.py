"""Every kind of text input against every tool that reads text (vaswani_hf.io.TextInput), generated from the
registry: each tool's test file declares its text inputs (`Cases.reads`, tests/cli_contract.py), and every one runs
with its input given as

- a regular file (the reference), a named pipe, a process substitution (/dev/fd/N), /dev/stdin fed by a pipe, "-" fed
  by a pipe, "-" redirected from a file (where the input may be anywhere: "-" names no corpus file);
- a file removed, or replaced by another, while the tool reads it: the tool reads the file it opened, whole;
- a file changed in place while read: refused in one line naming it, exit status 2.

A run gives the bytes of the reference (its declared outputs, and standard output where declared); a pipe is opened
once (a named pipe's writer watches for a second reader; a process substitution read twice would give an empty
second pass, which the comparison catches) and never waits forever (each case has a time limit); a copy spooled in
TMPDIR is gone when the tool returns; no carriage return reaches standard error (not a terminal: plain progress lines,
vaswani_hf.io.progress). A tool that reads text without declaring it fails `test_every_text_input_is_declared`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_contract import declared, every_tool, run_main, write

import vaswani_hf.io.text
from vaswani_hf.cli.command import TEXT_KINDS
from vaswani_hf.cli.registry import COMMANDS

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

READERS = declared("reads")
KINDS = (
    "file",
    "named-pipe",
    "process-substitution",
    "dev-stdin",
    "dash-pipe",
    "dash-file",
    "removed-while-read",
    "replaced-while-read",
    "changed-while-read",
)
DASH = ("dash-pipe", "dash-file")  # "-" itself: only where the input may be anywhere
CASES = [
    pytest.param(reads, kind, id=f"{reads.id}-{kind}", marks=[pytest.mark.slow] if reads.tool == "train" else [])
    for reads in READERS
    for kind in KINDS[1:]
    if not (reads.at is not None and kind in DASH)
]


def _data(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:  # the tool stopped reading (a refusal)
        pass
    finally:
        os.close(fd)


class NamedPipe:
    """A named pipe that gives `data` to its first reader, then counts any later reader (a second read of a pipe)."""

    def __init__(self, path: Path, data: bytes):
        self.path, self.data, self.reopened = path, data, 0
        self.stop = threading.Event()
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _open_here(self) -> bool:
        """Whether this process (the tool runs in it) holds the pipe open."""
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(self.path):
                    return True
            except OSError:
                continue
        return False

    def _serve(self) -> None:
        _write_all(os.open(self.path, os.O_WRONLY), self.data)  # waits for the tool to open it
        deadline = time.monotonic() + 10  # the reader's descriptor appears just after the writer's open returns
        while not self._open_here() and time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(0.005)
        while self._open_here() and not self.stop.is_set():  # the first reader reads to the end and closes
            time.sleep(0.02)
        while not self.stop.is_set():
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only while a reader has it open
            except OSError:
                time.sleep(0.02)
                continue
            if not self.stop.is_set():
                self.reopened += 1
            os.close(fd)  # the second reader sees the end at once, instead of waiting forever

    def close(self) -> None:
        self.stop.set()
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # releases a writer still waiting for a reader
        self.thread.join(timeout=30)
        os.close(reader)


@contextmanager
def standard_input(fd: int, monkeypatch):
    """Descriptor 0 (and sys.stdin) is `fd` while the tool runs, as a shell's redirection makes it."""
    saved = os.dup(0)
    os.dup2(fd, 0)
    os.close(fd)
    monkeypatch.setattr(sys, "stdin", open(0, encoding="utf-8", closefd=False))  # noqa: SIM115
    try:
        yield
    finally:
        sys.stdin.close()
        os.dup2(saved, 0)
        os.close(saved)


def _when_opened(path: Path, act, monkeypatch) -> None:
    """`act()` once, right after the tool opened `path` (TextInput.open)."""
    opened = vaswani_hf.io.text.TextInput.open
    done = []

    def open_then_act(self):
        opened(self)
        if str(self.path) == str(path) and not done:
            done.append(act())

    monkeypatch.setattr(vaswani_hf.io.text.TextInput, "open", open_then_act)


@contextmanager
def given_as(kind: str, lines: list[str], folder: Path, at: Path | None, monkeypatch):
    """The text `lines` as an input of `kind`: yields its name on the command line, and afterwards a list of
    problems (a pipe opened twice)."""
    data, problems = _data(lines), []
    place = at or folder / "in" / "source.txt"
    place.parent.mkdir(parents=True, exist_ok=True)
    if kind in ("file", "removed-while-read", "replaced-while-read", "changed-while-read"):
        write(place, data)
        acts = {
            "removed-while-read": lambda: place.unlink(),
            "replaced-while-read": lambda: os.replace(write(folder / "other.txt", b"other text\n"), place),
            "changed-while-read": lambda: place.open("ab").write(b"one more line\n"),
        }
        if kind in acts:
            _when_opened(place, acts[kind], monkeypatch)
        yield str(place), problems
    elif kind == "named-pipe":
        pipe = NamedPipe(place, data)
        try:
            yield str(place), problems
        finally:
            pipe.close()
            problems += [f"the named pipe was opened {pipe.reopened + 1} times"] if pipe.reopened else []
    elif kind == "process-substitution":
        read_end, write_end = os.pipe()
        threading.Thread(target=_write_all, args=(write_end, data), daemon=True).start()
        name = f"/dev/fd/{read_end}"
        if at is not None:
            place.symlink_to(name)
        try:
            yield str(place) if at is not None else name, problems
        finally:
            os.close(read_end)
    else:  # standard input: a pipe (dev-stdin, dash-pipe) or a file (dash-file)
        if kind == "dash-file":
            fd = os.open(write(place, data), os.O_RDONLY)
        else:
            fd, write_end = os.pipe()
            threading.Thread(target=_write_all, args=(write_end, data), daemon=True).start()
        if at is not None:
            place.symlink_to("/dev/stdin")
        with standard_input(fd, monkeypatch):
            yield "-" if kind in DASH else str(place) if at is not None else "/dev/stdin", problems


def run_reads(reads, kind: str, assets, folder: Path, capfd, monkeypatch) -> tuple[int, str, str, list[str]]:
    """Run the declared command line with its input given as `kind`; (status, stdout, stderr, problems)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tmp").mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setattr(tempfile, "tempdir", str(folder / "tmp"))  # TMPDIR: where a pipe is spooled
    at = reads.at(folder) if reads.at is not None else None
    with given_as(kind, reads.text(assets), folder, at, monkeypatch) as (source, problems):
        argv = reads.argv(assets, folder, source)
        capfd.readouterr()
        code, warned = run_main(reads.tool, argv)
        out, err = capfd.readouterr()
    monkeypatch.undo()
    problems += [f"left in TMPDIR: {p.name}" for p in (folder / "tmp").iterdir() if p.name.startswith("vaswani_spool")]
    problems += ["a carriage return on standard error (not a terminal)"] if "\r" in err else []
    return code, out, err + "".join(f"{w}\n" for w in warned), problems


_REFERENCES: dict[str, tuple[dict, str]] = {}


def reference(reads, assets, tmp_path_factory, capfd, monkeypatch) -> tuple[dict, str]:
    """({output: bytes}, stdout) of the declared command line reading a regular file (once per test process)."""
    if reads.id not in _REFERENCES:
        folder = tmp_path_factory.mktemp(f"reference-{reads.id}")
        code, out, err, problems = run_reads(reads, "file", assets, folder, capfd, monkeypatch)
        assert code == 0 and not problems, (code, err[-3000:], problems)
        _REFERENCES[reads.id] = ({p.relative_to(folder): p.read_bytes() for p in reads.outputs(folder)}, out)
    return _REFERENCES[reads.id]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("reads, kind", CASES)
def test_every_input_kind_gives_the_bytes_of_a_file(
    reads, kind, assets, tmp_path, tmp_path_factory, capfd, monkeypatch
):
    outputs, stdout = reference(reads, assets, tmp_path_factory, capfd, monkeypatch)
    code, out, err, problems = run_reads(reads, kind, assets, tmp_path / "case", capfd, monkeypatch)
    shown = f"{reads.id} with {kind}: exit status {code}\nSTDERR:\n{err[-3000:]}"
    if kind == "changed-while-read":
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and "Traceback" not in err, shown
        assert "changed while it was read" in lines[-1], shown
        assert "source.txt" in lines[-1] or "train.en" in lines[-1], shown
        assert not any((tmp_path / "case" / p).exists() for p in outputs), shown
    else:
        assert code == 0, shown
        differ = [str(p) for p, data in outputs.items() if (tmp_path / "case" / p).read_bytes() != data]
        problems += [f"differs from reading a file: {p}" for p in differ]
        problems += ["standard output differs from reading a file"] if reads.stdout and out != stdout else []
    assert not problems, "\n".join([shown, *problems])


def test_every_text_input_is_declared(assets, tmp_path):
    """A tool whose declaration reads text (a path of a text kind, vaswani_hf.cli.command.TEXT_KINDS, in its command
    line `Cases.run`) declares its text inputs (`Cases.reads`), so that the battery above runs them."""
    readers = {reads.tool for reads in READERS}
    for tool, case in every_tool().items():
        command = COMMANDS[tool]
        if command.parse is not None:  # its own parser (train: a recipe): its corpus files are declared by hand
            continue
        args = command.build_parser().parse_args([str(a) for a in case.run(assets, tmp_path)])
        kinds = {use.kind for use in command.paths(args).inputs}
        assert not (kinds & set(TEXT_KINDS)) or tool in readers, f"{tool} reads text but declares no `reads`"
