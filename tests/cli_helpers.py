"""Checks of the command-line contract (vaswani_hf.cli.contract.run_cli) shared by the tests of the tools: an expected error is
exactly one line on stderr, without a traceback, with the tool's exit status."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def assert_one_line_error(main, argv, capsys, code: int, *fragments: str) -> str:
    """Run a tool's `main(argv)` in this process; it must return `code` and print one stderr line holding every
    fragment. Returns that line."""
    capsys.readouterr()
    assert main(list(argv)) == code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def run_script(name: str, argv, env: dict | None = None, cwd=None, timeout: int = 180) -> subprocess.CompletedProcess:
    """`python scripts/<name>.py ARGV` in a fresh interpreter (the thin script, as a user runs it)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VASWANI_DEBUG")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / f"{name}.py"), *map(str, argv)],
        env=full_env,
        cwd=str(cwd or REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def assert_script_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def truncate(path: Path, keep: float = 0.5) -> None:
    """Cut a file to a fraction of its size, as an interrupted copy or download leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


BROKEN_FOLDER_CASES = ("missing", "file", "truncated", "config", "tokenizer")


def break_model_folder(folder: Path, case: str, tmp_path: Path) -> Path:
    """The model folder to pass after breaking `folder` as `case` says: absent, a file instead of the folder, truncated
    weights, an invalid config.json, no tokenizer.json (any other case: the folder unchanged)."""
    if case == "missing":
        return tmp_path / "absent"
    if case == "file":
        return folder / "config.json"
    if case == "truncated":
        truncate(folder / "model.safetensors")
    elif case == "config":
        (folder / "config.json").write_text("{not json", encoding="utf-8")
    elif case == "tokenizer":
        (folder / "tokenizer.json").unlink()
    return folder


def free_port() -> int:
    """A loopback port that nothing listens on now (the system picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
