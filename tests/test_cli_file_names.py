"""A file name that is not UTF-8 is shown as the user types it, by every tool.

On Linux a file name is bytes, and Python holds a byte that is not UTF-8 as a lone surrogate (PEP 383): the name
`corpus` + byte 0xFF is the string "corpus\\udcff". Printed as it is, standard error would show `corpus\\udcff` and
standard output would fail with a traceback. Every tool's error line, and every other line the tools print, shows it as
`corpus$'\\xff'` instead, which is what the user types in bash, zsh or ksh to name that file
(`vaswani_hf.errors.as_typed`). The checks read the bytes of stderr: a replacement character (U+FFFD) or Python's
`\\udcff` escape there would fail them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import GERMAN, TOOLS, every_tool, run_main, snapshot, write
from cli_helpers import REPO

from vaswani_hf.errors import as_typed

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

RAW = b"corpus\xff"  # a folder's name as bytes: "corpus" and the byte 0xFF, which is no UTF-8
NAME = os.fsdecode(RAW)  # as Python holds it: "corpus\udcff"
TYPED = b"corpus$'\\xff'"  # as the user types it in the shell
MANGLED = (b"\\udcff", "\ufffd".encode(), b"\xff")  # Python's escape, the replacement character, the raw byte


def assert_shown_as_typed(err: bytes) -> None:
    """The one stderr line names the folder as typed, and in no other way."""
    lines = err.splitlines()
    assert len(lines) == 1 and b"Traceback" not in err, err
    assert TYPED in lines[0], err
    for mangled in MANGLED:
        assert mangled not in err, (mangled, err)


def test_as_typed_writes_each_run_of_bytes_in_the_shells_quoting():
    assert as_typed(os.fsdecode(b"a\xff\xfeb.txt")) == "a$'\\xff\\xfe'b.txt"
    assert as_typed(os.fsdecode(b"\xe4/\xff")) == "$'\\xe4'/$'\\xff'"
    assert as_typed("Größe é.txt") == "Größe é.txt"  # UTF-8 names are left as they are


@pytest.mark.parametrize("tool", TOOLS)
def test_a_missing_input_in_a_folder_whose_name_is_not_utf8_is_named_as_typed(
    tool, tmp_path, monkeypatch, capfdbinary
):
    """Each tool's refused command line (an input that is absent) with its paths inside such a folder: one line, exit
    status 2, the folder named as typed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    capfdbinary.readouterr()
    code, warned = run_main(tool, every_tool()[tool].refused(tmp_path / NAME))
    err = capfdbinary.readouterr().err
    assert code == 2 and not warned, (code, err, warned)
    assert_shown_as_typed(err)
    assert list(tmp_path.iterdir()) == []


WRITERS = [path_case for case in every_tool().values() for path_case in case.paths if path_case.output is not None]


@pytest.mark.parametrize("command", WRITERS, ids=lambda c: c.id)
def test_an_output_inside_an_input_whose_name_is_not_utf8_is_named_as_typed(
    command, assets, tmp_path, monkeypatch, capfdbinary
):
    """Each command line with paths, its inputs copied into such a folder, and its output the first input or inside
    it: refused before any work, in one line naming the output's flag and path as typed; nothing changes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    inputs = command.inputs(tmp_path / NAME, assets)
    first = inputs[command.roles[0]]
    before = snapshot(tmp_path)
    capfdbinary.readouterr()
    code, warned = run_main(command.tool, command.argv(inputs, str(first / "out" if first.is_dir() else first), False))
    err = capfdbinary.readouterr().err
    assert code == 2 and not warned, (code, err, warned)
    assert_shown_as_typed(err)
    assert command.output.encode() in err, err
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_a_script_shows_the_name_as_typed_on_stderr_in_a_fresh_process(tmp_path):
    """In a real process (Python's own stderr and stdout, not the tests' capture): the refusal of a file that is not
    UTF-8 text, and the report of a successful run, name the files as typed."""
    folder = tmp_path / NAME
    latin1 = write(folder / "hyp.txt", b"ein mann reitet ein pferd .\nna\xefve .\n")
    ref = write(folder / "ref.txt", GERMAN[:2])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VASWANI_DEBUG")}

    def evaluate(hyp: Path) -> subprocess.CompletedProcess:
        argv = ["--hypotheses", hyp, "--references", ref, "--out", folder / "scores.json"]
        return subprocess.run(
            [sys.executable, str(REPO / "scripts" / "evaluate_translations.py"), *map(os.fsencode, argv)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )

    refused = evaluate(latin1)
    assert refused.returncode == 2, refused.stderr
    assert_shown_as_typed(refused.stderr)
    assert TYPED + b"/hyp.txt:2: not valid UTF-8" in refused.stderr
    done = evaluate(write(folder / "hyp2.txt", GERMAN[:2]))
    assert done.returncode == 0, done.stderr
    assert b"wrote " + os.fsencode(tmp_path) + b"/" + TYPED + b"/scores.json" in done.stderr, done.stderr
    assert not any(mangled in done.stderr + done.stdout for mangled in MANGLED), done.stderr
