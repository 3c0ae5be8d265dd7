"""A file name that is not UTF-8 is shown as the user types it, by every tool.

On Linux a file name is bytes, and Python holds a byte that is not UTF-8 as a lone surrogate (PEP 383): the name
`corpus` + byte 0xFF is the string "corpus\\udcff". Printed as it is, standard error would show `corpus\\udcff` and
standard output would fail with a traceback. Every tool's error line, and every other line the tools print, shows it as
`corpus$'\\xff'` instead, which is what the user types in bash, zsh or ksh to name that file
(`vaswani_hf.errors.as_typed`). The checks read the bytes of stderr: a replacement character (U+FFFD) or Python's
`\\udcff` escape there would fail them.

The libraries written in Rust take only UTF-8 paths (the tokenizers library raises UnicodeEncodeError, safetensors
refuses to open the file). An output folder in such a folder is still written, and holds the same bytes as under a
UTF-8 name, except a training run's folder, which the Trainer writes into and reads back through those libraries: it is
refused in one line before any work, as is every model, tokenizer or CTranslate2 folder read from such a folder
(`vaswani_hf.io.check_library_name`, `check_library_input`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import GERMAN, LINES, TOOLS, TRANSLATE_OPTIONS, every_tool, run_main, snapshot, write
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


# The outputs refused in a folder whose name is not UTF-8, by the flag or recipe key the error names; every other tool
# writes its output there.
REFUSED_OUTPUTS = {"train": "output_dir"}


def written(folder: Path) -> dict[str, str]:
    """{path relative to `folder`: sha256} of what a run wrote there."""
    return {os.path.relpath(path, folder): digest for path, digest in snapshot(folder).items()}


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tools_output_in_a_folder_whose_name_is_not_utf8_is_written_or_refused_before_any_work(
    tool, assets, tmp_path, monkeypatch, capfdbinary
):
    """Each tool's run to completion, its output inside such a folder: the output is written, with the same files and
    bytes as the same run into a UTF-8 folder, or (REFUSED_OUTPUTS) the run is refused in one line naming the output
    as typed and saying why, and nothing is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    folder, plain = tmp_path / NAME, tmp_path / "plain"
    folder.mkdir()
    plain.mkdir()
    before = snapshot(assets.root)
    capfdbinary.readouterr()
    code, warned = run_main(tool, every_tool()[tool].run(assets, folder))
    err = capfdbinary.readouterr().err
    if tool in REFUSED_OUTPUTS:
        assert code == 2 and not warned, (code, err, warned)
        assert_shown_as_typed(err)
        assert f"{REFUSED_OUTPUTS[tool]} ".encode() in err and b"not UTF-8" in err, err
        assert list(folder.iterdir()) == []
    else:
        assert code == 0 and b"Traceback" not in err, (code, err)
        assert run_main(tool, every_tool()[tool].run(assets, plain))[0] == 0
        assert written(folder) == written(plain)
    assert snapshot(assets.root) == before


def _inputs_in(folder: Path, assets):
    """The shared assets, copied into `folder`."""
    shutil.copytree(assets.root, folder, symlinks=True)
    moved = {
        name: folder / getattr(assets, name).relative_to(assets.root)
        for name in ("model", "learned", "ct2", "corpus", "recipe", "run", "plain")
    }
    return dataclasses.replace(assets, root=folder, **moved)


# The tools that read a model folder, by the flag (or the name) the error gives it; the others read text only, which
# Python reads under any name.
REFUSED_INPUTS = {
    "translate": "--model",
    "average_checkpoints": "checkpoint folder",
    "export_marian": "--model_dir",
    "export_ctranslate2": "--model_dir",
    "visualize_attention": "--model_dir",
    "push_to_hub": "--model_dir",
}
# The other library inputs: a CTranslate2 folder, and a tokenizer folder given apart from the model.
OTHER_LIBRARY_INPUTS = {
    "translate-ctranslate2": (
        "translate",
        lambda i, a, o: [i.plain, "--engine", "ctranslate2", "--model", i.ct2, *TRANSLATE_OPTIONS, "--output", o],
        "CTranslate2 model folder",
    ),
    "train-tokenizer_path": (
        "train",
        lambda i, a, o: ["--recipe", a.recipe, "--data_dir", a.corpus, "--output_dir", o, "--tokenizer_path", i.model],
        "tokenizer",
    ),
    "export_ctranslate2-tokenizer": (
        "export_ctranslate2",
        lambda i, a, o: ["--model_dir", a.model, "--tokenizer", i.model, "--out_dir", o],
        "--tokenizer",
    ),
}


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tools_inputs_in_a_folder_whose_name_is_not_utf8_are_read_or_refused_before_any_work(
    tool, assets, tmp_path, monkeypatch, capfdbinary
):
    """Each tool's run to completion, every input copied into such a folder and the output elsewhere: text is read,
    and a model folder (REFUSED_INPUTS) is refused in one line naming it as typed and saying why, before any work."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    inputs, out = _inputs_in(tmp_path / NAME, assets), tmp_path / "out"
    out.mkdir()
    before = snapshot(tmp_path / NAME)
    capfdbinary.readouterr()
    code, warned = run_main(tool, every_tool()[tool].run(inputs, out))
    err = capfdbinary.readouterr().err
    if tool in REFUSED_INPUTS:
        assert code == 2 and not warned, (code, err, warned)
        assert_shown_as_typed(err)
        assert f"{REFUSED_INPUTS[tool]} ".encode() in err and b"not UTF-8" in err, err
        assert list(out.iterdir()) == []
    else:
        assert code == 0 and b"Traceback" not in err, (code, err)
    assert snapshot(tmp_path / NAME) == before


@pytest.mark.parametrize("case", OTHER_LIBRARY_INPUTS, ids=str)
def test_a_ctranslate2_or_tokenizer_folder_whose_name_is_not_utf8_is_refused_before_any_work(
    case, assets, tmp_path, monkeypatch, capfdbinary
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    tool, argv, named = OTHER_LIBRARY_INPUTS[case]
    inputs, out = _inputs_in(tmp_path / NAME, assets), tmp_path / "out"
    before = snapshot(tmp_path)
    capfdbinary.readouterr()
    code, warned = run_main(tool, argv(inputs, assets, out))
    err = capfdbinary.readouterr().err
    assert code == 2 and not warned, (code, err, warned)
    assert_shown_as_typed(err)
    assert named.encode() in err and b"not UTF-8" in err, err
    assert snapshot(tmp_path) == before


def test_train_bpe_tokenizer_saves_into_a_folder_whose_name_is_not_utf8(tmp_path):
    """The Python API's save_dir: the tokenizer is written there, and loads once the folder has a UTF-8 name."""
    from vaswani_hf.tokenization import load_tokenizer, train_bpe_tokenizer

    trained = train_bpe_tokenizer(LINES, vocab_size=300, save_dir=tmp_path / NAME / "tok", show_progress=False)
    renamed = (tmp_path / NAME).rename(tmp_path / "renamed") / "tok"
    assert load_tokenizer(renamed)(LINES[0])["input_ids"] == trained(LINES[0])["input_ids"]


def test_without_descriptor_names_an_output_folder_whose_name_is_not_utf8_is_refused(tmp_path, monkeypatch):
    """Where /proc is missing, no library can be given the folder: check_output_dir refuses it before any work, and
    still accepts a UTF-8 name."""
    from vaswani_hf.errors import UsageError
    from vaswani_hf.io import check_output_dir

    monkeypatch.setattr("vaswani_hf.io.outputs.descriptor_names_work", lambda: False)
    with pytest.raises(UsageError, match="not UTF-8"):
        check_output_dir(tmp_path / NAME / "out")
    assert check_output_dir(tmp_path / "out") == tmp_path / "out"
