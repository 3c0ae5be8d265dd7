"""vaswani_hf.io.TextInput, the one reader of every input kind: a pipe is never opened twice (a second pass reads a
spool, bounded and removed when the input closes), a regular file is read again through the descriptor opened first
(removed or replaced meanwhile: still read whole; changed in place: refused naming it), standard input redirected from
a file is read again from where it began. Every tool runs every kind: tests/test_cli_input_kinds.py."""

from __future__ import annotations

import io as std_io
import os
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from test_cli_input_kinds import NamedPipe, standard_input

import vaswani_hf.io.text
from vaswani_hf.io import TextInput, UsageError, check_read_once, reads_once

LINES = ["a man is riding a horse .", "zwei hunde", "", "ünïcödé line"]
DATA = "".join(line + "\n" for line in LINES).encode("utf-8")


@pytest.fixture
def spool_folder(tmp_path, monkeypatch) -> Path:
    """TMPDIR for the spools of a test."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _fed_pipe(data: bytes) -> str:
    """A process substitution's name (/dev/fd/N) for a pipe holding `data`."""
    read_end, write_end = os.pipe()

    def feed():
        os.write(write_end, data)
        os.close(write_end)

    threading.Thread(target=feed, daemon=True).start()
    return f"/dev/fd/{read_end}"


@pytest.mark.timeout(120)
def test_a_named_pipe_read_twice_is_opened_once_and_spooled(tmp_path, spool_folder):
    pipe = NamedPipe(tmp_path / "fifo", DATA)
    try:
        with TextInput(pipe.path, passes=2) as text:
            assert not text.rereadable
            assert list(text.lines()) == LINES
            assert [p.name.startswith("vaswani_spool_") for p in spool_folder.iterdir()] == [True]
            assert list(text.lines()) == LINES
    finally:
        pipe.close()
    assert pipe.reopened == 0 and list(spool_folder.iterdir()) == []  # removed when the input closed


def test_a_process_substitution_read_twice_gives_its_lines_twice(spool_folder):
    name = _fed_pipe(DATA)
    try:
        with TextInput(name, passes=2) as text:
            assert list(text.lines()) == LINES and list(text.lines()) == LINES
    finally:
        os.close(int(name.rsplit("/", 1)[1]))
    assert list(spool_folder.iterdir()) == []


def test_a_pipe_read_once_is_not_spooled(spool_folder):
    name = _fed_pipe(DATA)
    try:
        with TextInput(name) as text:
            assert list(text.lines()) == LINES
            assert list(spool_folder.iterdir()) == []
            with pytest.raises(RuntimeError, match="read 2 times, declared 1"):
                list(text.lines())
    finally:
        os.close(int(name.rsplit("/", 1)[1]))


def test_the_spool_is_bounded_and_removed(spool_folder, monkeypatch):
    monkeypatch.setattr(vaswani_hf.io.text, "SPOOL_SHARE", 1e-15)  # a bound of a few bytes
    name = _fed_pipe(DATA)
    try:
        with pytest.raises(UsageError) as error, TextInput(name, "input file", passes=2) as text:
            list(text.lines())
    finally:
        os.close(int(name.rsplit("/", 1)[1]))
    message = str(error.value)
    assert message.startswith(f"{name}: more than ") and "read only once" in message and "TMPDIR" in message
    assert list(spool_folder.iterdir()) == []


@pytest.mark.parametrize("change", ["removed", "replaced"])
def test_a_file_removed_or_replaced_between_passes_is_read_whole_as_opened(tmp_path, change):
    path = tmp_path / "in.txt"
    path.write_bytes(DATA)
    with TextInput(path, passes=2) as text:
        assert text.rereadable and list(text.lines()) == LINES
        if change == "removed":
            path.unlink()
        else:
            (tmp_path / "other.txt").write_text("other\n")
            os.replace(tmp_path / "other.txt", path)
        assert list(text.lines()) == LINES


@pytest.mark.parametrize("when", ["during a pass", "between passes"])
def test_a_file_changed_in_place_is_refused_naming_it(tmp_path, when):
    path = tmp_path / "in.txt"
    path.write_bytes(DATA)
    refused = rf"^{path}: the file changed while it was read \(size {len(DATA)} -> {len(DATA) + 14} bytes"
    with TextInput(path, passes=2) as text:
        lines = text.lines()
        next(lines)
        if when == "between passes":
            assert list(lines) == LINES[1:]
            lines = text.lines()
        with path.open("ab") as handle:
            handle.write(b"one more line\n")
        with pytest.raises(UsageError, match=refused):
            list(lines)


def test_standard_input_from_a_file_is_read_again_from_where_it_began(monkeypatch):
    buffer = std_io.BytesIO(b"skipped by the caller\n" + DATA)
    buffer.readline()
    monkeypatch.setattr(sys, "stdin", std_io.TextIOWrapper(buffer, encoding="utf-8"))
    with TextInput("-", passes=2) as text:
        assert text.rereadable and list(text.lines()) == LINES and list(text.lines()) == LINES


@pytest.mark.timeout(120)
def test_two_names_of_one_pipe_are_refused_and_a_file_named_twice_is_not(tmp_path, monkeypatch):
    read_end, write_end = os.pipe()
    os.close(write_end)
    with standard_input(read_end, monkeypatch):
        assert reads_once("-") and reads_once("/dev/stdin")
        with pytest.raises(UsageError, match=r"^--references /dev/stdin and --hypotheses - are the same pipe"):
            check_read_once([("--hypotheses", "-"), ("--references", "/dev/stdin")])
    path = tmp_path / "in.txt"
    path.write_bytes(DATA)
    check_read_once([("--hypotheses", path), ("--references", path)])
    assert not reads_once(path) and not reads_once(os.devnull) and not reads_once(tmp_path / "absent")
