"""vaswani_hf.io.text: the one text reader and writer (strict UTF-8 naming file and line, BOM, universal newlines,
one item per line, atomic writes) and JSON."""

from __future__ import annotations

import io as std_io
import os
import sys
from pathlib import Path

import pytest

from vaswani_hf import io
from vaswani_hf.io import (
    UsageError,
    iter_lines,
    read_json,
    read_lines,
    replace_atomically,
    write_lines,
)

# ---------------------------------------------------------------------------------------------------------------------
# Reading: one item per line, strict UTF-8, BOM dropped, universal newlines
# ---------------------------------------------------------------------------------------------------------------------


def _file(tmp_path: Path, data: bytes, name: str = "f.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", []),  # empty file: no line at all
        (b"\n", [""]),  # one empty line
        (b"a\nb\n", ["a", "b"]),  # a final newline adds no empty line
        (b"a\nb", ["a", "b"]),  # no final newline: the last line still counts
        (b"a\n\n\nb\n\n", ["a", "", "", "b", ""]),  # empty lines kept, N lines in -> N items out
        ("\ufeffa\nb\n".encode(), ["a", "b"]),  # byte-order mark dropped
        ("\ufeff\nb\n".encode(), ["", "b"]),  # a BOM-only first line is an empty first item
        ("\ufeff".encode(), []),  # a file that is only a BOM is empty
        ("a\ufeff\n".encode(), ["a\ufeff"]),  # only a leading BOM is dropped; elsewhere it is text
        (b"a\r\nb\r\n", ["a", "b"]),  # CRLF
        (b"a\r\n\r\nb", ["a", "", "b"]),
        (b"a\rb\r", ["a", "b"]),  # a lone CR ends a line too (old Mac files)
        (b"a\rb", ["a", "b"]),
        (b"a\r\rb\n", ["a", "", "b"]),
        (b"a\r", ["a"]),
        (b"\r", [""]),
        ("x\u2028y\u0085z\x0b\x0c\x1c\n".encode(), ["x\u2028y\u0085z\x0b\x0c\x1c"]),  # not line ends: text
        (b"  spaced\t \n", ["  spaced\t "]),  # nothing is stripped
    ],
)
def test_reader_rules(tmp_path, data, expected):
    path = _file(tmp_path, data)
    assert read_lines(path) == expected
    assert list(iter_lines(str(path))) == expected


def test_reader_rules_hold_across_block_boundaries(tmp_path, monkeypatch):
    """The file is decoded in CHUNK_BYTES blocks; a CRLF, a multi-byte character or a BOM cut by a block boundary
    reads the same as in one block, whatever the block size."""
    data = ("\ufeffé\r\nzwei\rdrei\n\nü\u2028ber\r\n" * 3 + "letzte").encode()
    expected = read_lines(_file(tmp_path, data))
    assert expected[:5] == ["é", "zwei", "drei", "", "ü\u2028ber"] and len(expected) == 16
    for size in range(1, len(data) + 2):
        monkeypatch.setattr(io.text, "CHUNK_BYTES", size)
        assert read_lines(tmp_path / "f.txt") == expected, size


@pytest.mark.parametrize("size", [None, 1, 3, 7, 64])
def test_invalid_utf8_names_file_and_line(tmp_path, monkeypatch, size):
    """Also when the bad byte is in a later block than the first (line numbers carried across blocks), and with CR
    and CRLF line ends counted as line ends."""
    if size is not None:
        monkeypatch.setattr(io.text, "CHUNK_BYTES", size)
    path = _file(tmp_path, b"eins\nzwei\r\ndrei\rvier\nStra\xdfe und mehr\nsechs\n", "latin.de")
    with pytest.raises(UsageError) as error:
        read_lines(path, what="corpus file")
    message = str(error.value)
    assert message.startswith(f"{path}:5: not valid UTF-8 (byte 0xdf at byte 5 of the line)")
    assert "iconv" in message and "\n" not in message
    with pytest.raises(UsageError, match=r"latin\.de:5: not valid UTF-8"):
        list(iter_lines(path))


def test_invalid_utf8_past_the_first_block_after_many_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(io.text, "CHUNK_BYTES", 1000)
    lines = [f"line {i} mit Umlaut ä" for i in range(999)]
    data = ("\n".join(lines) + "\n").encode() + b"bad \xff here\n" + b"ok\n"
    path = _file(tmp_path, data, "big.txt")
    read = iter_lines(path)
    assert [next(read) for _ in range(900)] == lines[:900]  # streamed block by block: earlier blocks come out
    with pytest.raises(UsageError, match=r"big\.txt:1000: not valid UTF-8 \(byte 0xff at byte 5 of the line\)"):
        list(read)


def test_invalid_utf8_on_a_last_line_without_newline(tmp_path):
    path = _file(tmp_path, b"a\r\nb\r\n\xe9")
    with pytest.raises(UsageError, match=r"f\.txt:3: not valid UTF-8 \(byte 0xe9 at byte 1 of the line\)"):
        read_lines(path)


def test_truncated_multibyte_character_at_the_end(tmp_path):
    path = _file(tmp_path, "a\nü".encode()[:-1])
    with pytest.raises(UsageError, match=r"f\.txt:2: not valid UTF-8"):
        read_lines(path)


def test_missing_folder_and_unreadable_input(tmp_path):
    with pytest.raises(UsageError, match=r"corpus file not found: .*nope\.txt"):
        read_lines(tmp_path / "nope.txt", what="corpus file")
    with pytest.raises(UsageError, match=r"input file .* is a folder"):
        read_lines(tmp_path)
    if os.name == "posix" and os.geteuid() != 0:  # root reads any file
        secret = _file(tmp_path, b"x\n", "secret.txt")
        secret.chmod(0)
        with pytest.raises(UsageError, match=r"secret\.txt is not readable"):
            read_lines(secret)


def test_stdin_is_dash(monkeypatch):
    monkeypatch.setattr(sys, "stdin", std_io.TextIOWrapper(std_io.BytesIO("\ufeffa\r\nb\rc\n\nd".encode())))
    assert read_lines("-") == ["a", "b", "c", "", "d"]
    monkeypatch.setattr(sys, "stdin", std_io.TextIOWrapper(std_io.BytesIO(b"ok\n\xff\n")))
    with pytest.raises(UsageError, match=r"^<stdin>:2: not valid UTF-8"):
        read_lines("-")


def test_read_json_names_line_and_column(tmp_path):
    assert read_json(_file(tmp_path, b'{"a": [1, 2]}', "ok.json")) == {"a": [1, 2]}
    bad = _file(tmp_path, b'{\n  "a": 1,\n  "b": \n}\n', "bad.json")
    with pytest.raises(UsageError, match=r"bad\.json:4: invalid JSON \(Expecting value at column 1\)"):
        read_json(bad)
    with pytest.raises(UsageError, match=r"bad\.bin: not UTF-8"):
        read_json(_file(tmp_path, b'{"a": "\xff"}', "bad.bin"))
    with pytest.raises(UsageError, match=r"settings not found: .*none\.json"):
        read_json(tmp_path / "none.json", what="settings")


# ---------------------------------------------------------------------------------------------------------------------
# Writing: N items -> N lines, atomic, nothing replaced without overwrite
# ---------------------------------------------------------------------------------------------------------------------


def test_write_lines_one_line_per_item(tmp_path):
    items = ["a", "", "  b  ", "line\nbreak", "cr\rhere", "crlf\r\nthere", "", 42]
    path = tmp_path / "out.txt"
    write_lines(path, items)
    data = path.read_bytes()
    assert data == b"a\n\n  b  \nline break\ncr here\ncrlf there\n\n42\n"
    assert len(read_lines(path)) == len(items)
    write_lines(tmp_path / "empty.txt", [])
    assert (tmp_path / "empty.txt").read_bytes() == b""


def test_write_then_read_gives_the_items_back(tmp_path):
    """What the reader keeps inside a line (U+2028, U+0085, form feed, a BOM that is not first, blanks) is text: the
    writer must keep it too, so that read -> write -> read is the identity."""
    items = ["x\u2028y", "a\u0085b", "page\x0cbreak", "", "mid\ufeffbom", " both ", "\t", "é ü ß 漢字"]
    path = tmp_path / "round.txt"
    write_lines(path, items)
    assert read_lines(path) == items
    again = tmp_path / "again.txt"
    write_lines(again, read_lines(path))
    assert again.read_bytes() == path.read_bytes()


def test_write_lines_to_stdout(capsys):
    write_lines("-", ["a", "b\nc"])
    write_lines(None, ["d"])
    assert capsys.readouterr().out == "a\nb c\nd\n"


def test_write_lines_refuses_existing_file_and_folder(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(UsageError, match=r"--output .*out\.txt exists; pass --overwrite to replace it"):
        write_lines(path, ["new"], what="--output")
    assert path.read_text() == "old\n"
    write_lines(path, ["new"], overwrite=True)
    assert path.read_text() == "new\n"
    with pytest.raises(UsageError, match=r"is a folder; give a file name"):
        write_lines(tmp_path, ["x"], overwrite=True)
    with pytest.raises(UsageError, match=r"folder .*missing does not exist; create it first"):
        write_lines(tmp_path / "missing" / "out.txt", ["x"])
    assert not (tmp_path / "missing").exists()


def test_write_lines_is_atomic(tmp_path):
    """A failure while the items are produced leaves the old file as it was and no temporary file behind."""
    path = tmp_path / "out.txt"
    path.write_text("old\n")

    def items():
        yield "first"
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_lines(path, items(), overwrite=True)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]

    with pytest.raises(RuntimeError, match="late"):
        with replace_atomically(path) as temporary:
            temporary.write_text("half")
            raise RuntimeError("late")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with replace_atomically(path) as temporary:
        assert temporary.parent == path.parent and temporary != path
        temporary.write_text("whole\n")
        assert path.read_text() == "old\n"  # nothing visible until the block ends
    assert path.read_text() == "whole\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_the_null_device_is_an_empty_input_and_other_devices_are_refused():
    assert read_lines(os.devnull) == []
    with pytest.raises(UsageError, match=r"/dev/zero is a character device, not a text file"):
        read_lines("/dev/zero")


def test_a_link_to_the_null_device_is_the_null_device(tmp_path):
    (tmp_path / "empty").symlink_to(os.devnull)
    assert read_lines(tmp_path / "empty") == []


def test_a_closed_standard_input_is_named(monkeypatch):
    from vaswani_hf.cli.surroundings import ClosedInput

    monkeypatch.setattr(sys, "stdin", ClosedInput())
    with pytest.raises(UsageError, match=r"^standard input is closed"):
        read_lines("-")
