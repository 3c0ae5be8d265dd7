"""The README cannot drift from the command-line tools: every command in its shell code blocks at least parses.

`scripts/train.py` commands run with `--check` (recipe, keys, types and data paths validated, nothing written);
the other tools are asked for `--help`, which exits before any work.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def readme_commands() -> list[str]:
    """Each command of the README's ```bash blocks: continuation lines joined, comments and redirections dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", command).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def script_and_arguments(command: str) -> tuple[str, list[str]] | None:
    """`[ENV=1] [accelerate launch OPTIONS] python scripts/X.py ARGS [> FILE]` -> ("X.py", ARGS); None otherwise."""
    words = shlex.split(command.split(" > ")[0].split(" | ")[-1])
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]
    for i, word in enumerate(words):
        if word.startswith("scripts/") and word.endswith(".py"):
            return Path(word).name, words[i + 1:]
    return None


COMMANDS = [c for c in readme_commands() if script_and_arguments(c) is not None]


def test_the_readme_shows_commands():
    assert any("scripts/train.py" in c for c in COMMANDS) and any("accelerate launch" in c for c in COMMANDS)
    assert "python -m pytest" in readme_commands()


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_parses(command, tmp_path):
    script, arguments = script_and_arguments(command)
    if "multi30k" in command and not MULTI30K.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    extra = ["--check"] if script == "train.py" else ["--help"]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / script), *arguments, *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
