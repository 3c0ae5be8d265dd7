"""What a resume reuses proves itself, for every resume mechanism of the registry: each tool's test file declares the
command lines whose finished units a resume reuses (`Cases.resumes`, tests/cli_contract.py: translate's windows in
`<output>.partial/`, a training run's checkpoints), and every one runs here:

1. the command line runs to its end once (the reference);
2. it runs again, stopped (KeyboardInterrupt, as Ctrl-C, SIGTERM or a crash) once every unit is written;
3. one unit is damaged: cut to half its length (a text unit: half its lines), or one byte changed (the length kept,
   a text unit's line count too), which no structural check sees;
4. the resumed run exits 0 with the reference's bytes, and names the damaged unit (its file and folder) on standard
   output or error: it was done again, never reused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_contract import declared, interrupted, run_main

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

RESUMABLES = declared("resumes")


def cut_to_half(path: Path) -> None:
    data = path.read_bytes()
    half = data[: len(data) // 2]
    cut = half.rfind(b"\n")
    path.write_bytes(half[: cut + 1] if path.suffix == ".txt" and cut >= 0 else half)


def one_byte_changed(path: Path) -> None:
    """A byte past the middle changed to another that is no line end (a letter's case, else its lowest bit)."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data)):
        changed = data[i] ^ 0x20 if chr(data[i]).isascii() and chr(data[i]).isalpha() else data[i] ^ 0x01
        if data[i] not in b"\r\n" and changed not in b"\r\n":
            data[i] = changed
            break
    path.write_bytes(bytes(data))


DAMAGES = {"cut-to-half": cut_to_half, "one-byte-changed": one_byte_changed}
CASES = [
    pytest.param(r, damage, id=f"{r.id}-{damage}", marks=[pytest.mark.slow] if r.tool == "train" else [])
    for r in RESUMABLES
    for damage in DAMAGES
]


def run(tool: str, argv: list, capfd) -> tuple[int, str]:
    capfd.readouterr()
    code, warned = run_main(tool, argv)
    out, err = capfd.readouterr()
    return code, out + err + "".join(f"{w}\n" for w in warned)


@pytest.mark.parametrize("resumable, damage", CASES)
def test_a_damaged_unit_is_done_again_never_reused(resumable, damage, assets, tmp_path, capfd, monkeypatch):
    whole, case = tmp_path / "whole", tmp_path / "case"
    for folder in (whole, case):
        folder.mkdir()
    monkeypatch.chdir(tmp_path)
    code, shown = run(resumable.tool, resumable.argv(assets, whole), capfd)
    assert code == 0, shown[-3000:]
    with monkeypatch.context() as patched:
        patched.setattr(resumable.stop, interrupted)
        code, shown = run(resumable.tool, resumable.argv(assets, case), capfd)
    assert code == 130, shown[-3000:]
    units = resumable.units(case)
    assert units and not resumable.output(case).exists(), (units, shown[-3000:])
    unit = units[-1]
    before = unit.read_bytes()
    DAMAGES[damage](unit)
    assert unit.read_bytes() != before and (damage == "cut-to-half") == (len(unit.read_bytes()) < len(before))
    code, shown = run(resumable.tool, [*resumable.argv(assets, case), *resumable.resume], capfd)
    assert code == 0, shown[-3000:]
    assert resumable.output(case).read_bytes() == resumable.output(whole).read_bytes(), shown[-3000:]
    assert unit.name in shown and unit.parent.name in shown, f"{unit} not named:\n{shown[-3000:]}"
