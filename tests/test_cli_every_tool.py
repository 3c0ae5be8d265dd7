"""The command-line contract's parts that every tool shares: each tool has its battery of cases
(tests/test_cli_<tool>.py); `--debug` and VASWANI_DEBUG=1 let an error or Ctrl-C through with its traceback; in a
fresh interpreter (a `scripts/` wrapper, a console entry point: each is the tool's `main`, tests/test_cli_registry.py)
an error is still one stderr line, after everything the libraries print while loading a model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import GERMAN, LATIN1, LINES, LONG, TOOLS, every_tool, interrupted, run_main, snapshot, write
from cli_helpers import run_script

from vaswani_hf.io import UsageError

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_tool_has_cases():
    counts = {tool: len(case.params) for tool, case in every_tool().items()}
    assert all(n >= 6 for n in counts.values()), counts


@pytest.mark.parametrize("tool", TOOLS)
def test_debug_lets_the_error_through(tool, tmp_path, monkeypatch):
    """--debug (or VASWANI_DEBUG=1): the error is not caught, so Python prints its traceback (see the subprocess
    check below)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        run_main(tool, [*every_tool()[tool].refused(tmp_path), "--debug"])
    monkeypatch.setenv("VASWANI_DEBUG", "1")
    with pytest.raises(UsageError):
        run_main(tool, every_tool()[tool].refused(tmp_path))
    assert list(tmp_path.iterdir()) == []


SECRETS = [
    "--token",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "--hub_token=abcdefghijklmnopqrstuvwxyz0123",
    "--password",
    "hunter2-hunter2",
    "--api-key",
    "sk-Zyxwvutsrqponmlkjihgfedcba",
    "Authorization: Bearer Qwerty",
]


@pytest.mark.parametrize("tool", TOOLS)
def test_a_credential_is_never_echoed(tool, tmp_path, monkeypatch, capsys):
    """argparse echoes unrecognised arguments: a value that looks like a credential (a Hugging Face token anywhere,
    the value after a flag or header naming a secret) is masked in the one error line. No flag is abbreviated, so
    `--token` is never read as --tokenizer."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    capsys.readouterr()
    assert run_main(tool, [*every_tool()[tool].refused(tmp_path), *SECRETS])[0] == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "***" in err, err
    for secret in ("AbCdEf", "abcdefghij", "hunter2", "Zyxwvu", "Qwerty"):
        assert secret not in err, err
    assert "--token" in err and "ambiguous" not in err, err  # unknown, not taken as an abbreviation of a flag


def test_debug_lets_ctrl_c_through(tmp_path, monkeypatch, assets):
    monkeypatch.setattr("vaswani_hf.cli.evaluate.compute_all", interrupted)
    hyp, ref = write(tmp_path / "hyp.txt", GERMAN), write(tmp_path / "ref.txt", GERMAN)
    with pytest.raises(KeyboardInterrupt):
        run_main("evaluate", ["--hypotheses", hyp, "--references", ref, "--debug"])


# --- the real wrappers, in fresh interpreters -------------------------------------------------------------------------


@pytest.mark.slow
def test_script_wrapper_one_line_and_debug_traceback(tmp_path):
    hyp, ref = write(tmp_path / "hyp.txt", LATIN1), write(tmp_path / "ref.txt", GERMAN[:2])
    before = snapshot(tmp_path)
    result = run_script(
        "evaluate_translations", ["--hypotheses", hyp, "--references", ref, "--out", tmp_path / "s.json"], cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"evaluate_translations.py: error: {hyp}:2: not valid UTF-8")
    debug = run_script(
        "train_tokenizer", ["--files", tmp_path / "absent.txt", "--out_dir", tmp_path / "tok", "--debug"], cwd=tmp_path
    )
    assert debug.returncode == 2 and "Traceback (most recent call last)" in debug.stderr  # the status of its line
    assert f"UsageError: --files not found: {tmp_path / 'absent.txt'}" in debug.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_console_entry_point_one_line_after_loading_the_model(tmp_path, assets):
    """In a fresh process everything the libraries print counts too: the model is loaded (transformers' logger and
    bars), then the over-long line is refused in one line."""
    source = write(tmp_path / "long.txt", [LINES[0], LONG])
    before = snapshot(tmp_path, assets.root)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VASWANI_DEBUG")}
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "vaswani-translate"),
            str(source),
            "--model",
            str(assets.learned),
            "--output",
            str(tmp_path / "out.txt"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vaswani-translate: error: {source}:2: "), result.stderr
    assert "learned position embeddings cover 32 positions" in lines[0]
    assert snapshot(tmp_path, assets.root) == before


@pytest.mark.slow
def test_the_runner_names_what_is_no_tool_and_every_module_form_runs(tmp_path):
    """`python -m vaswani_commands` with no tool, an unknown one or a module that is no tool: one line, exit 2;
    `python -m vaswani_hf.cli.<tool>` runs the tool (not silently nothing)."""
    env = {k: v for k, v in os.environ.items() if k != "VASWANI_DEBUG"}
    for argv in ([], ["no_such_tool"], ["registry"], ["--help"]):
        result = subprocess.run(
            [sys.executable, "-m", "vaswani_commands", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, (argv, result.stderr)
        assert "translate" in result.stderr and "Traceback" not in result.stderr, result.stderr
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaswani_hf.cli.export_marian",
            "--model_dir",
            tmp_path / "absent",
            "--out",
            tmp_path / "out",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2 and "--model_dir" in result.stderr and "not found" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "value, says",
    [
        ("", "--model is empty"),
        ("https://user:hf_Secret123@hub.example/org/m", "--model is a URL"),
        ("org/m?token=hf_Secret123", "--model not found"),
    ],
)
def test_a_path_that_is_empty_or_a_url_is_named_and_its_credentials_masked(value, says, tmp_path, capfd):
    hyp = write(tmp_path / "in.txt", LINES)
    assert run_main("translate", [hyp, "--model", value])[0] == 2
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1 and says in err and "Secret123" not in err, err


@pytest.mark.parametrize("tool", TOOLS)
def test_ctrl_c_while_the_tool_loads_is_an_interruption(tool, monkeypatch, capfd):
    """Ctrl-C before the tool's own boundary exists (its libraries still loading) ends the command as an
    interruption anywhere else does: one line, exit status 130, no traceback."""
    import vaswani_commands

    def loading(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(vaswani_commands, "import_module", loading)
    monkeypatch.setattr(sys, "argv", [f"vaswani-{tool}"])
    monkeypatch.delenv("VASWANI_DEBUG", raising=False)
    capfd.readouterr()
    assert vaswani_commands.run(tool, []) == 130
    err = capfd.readouterr().err
    assert err.splitlines() == [f"vaswani-{tool}: interrupted"], err
