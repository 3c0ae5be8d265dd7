"""The README cannot drift from the command-line tools: every command in its shell code blocks parses.

A command `[ENV=1] [accelerate launch OPTIONS] python scripts/X.py ARGS [> FILE]` is parsed by the parser of the tool
that `scripts/X.py` runs (`vaswani_hf.cli.<tool>.build_parser()`): unknown options, wrong types and missing required
options fail here. `scripts/train.py` commands go further: they run with `--check` (recipe, keys, types, data paths
and the output folder validated, nothing written; run from an empty folder, so that a user's earlier outputs/ do
not matter). Both in-process: no interpreter per command. A command that reads Multi30k reads it where conftest says
($VASWANI_MULTI30K_DIR, else ../shared/data/multi30k) and is skipped where it is absent.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MULTI30K, REPO

RECIPES_MULTI30K = REPO.parent / "shared" / "data" / "multi30k"  # where the recipes' data_dir points


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
            return Path(word).name, words[i + 1 :]
    return None


def cli_module(script: str):
    """The vaswani_hf.cli module a thin scripts/ wrapper runs (None for a script that is not a wrapper)."""
    import importlib

    found = re.search(r"from (vaswani_hf\.cli\.\w+) import main", (REPO / "scripts" / script).read_text())
    return importlib.import_module(found.group(1)) if found else None


def multi30k_data_dir(arguments: list[str]) -> list[str]:
    """["--data_dir", MULTI30K/<sub>] for a command whose recipe reads ../shared/data/multi30k/<sub> while the data
    lies elsewhere ($VASWANI_MULTI30K_DIR); [] where the command names its own data_dir, its recipe reads no
    Multi30k, or the data lies where the recipe looks."""
    if MULTI30K.resolve() == RECIPES_MULTI30K.resolve() or "--data_dir" in arguments or "--recipe" not in arguments:
        return []
    recipe = REPO / "recipes" / f"{arguments[arguments.index('--recipe') + 1]}.yaml"
    data_dir = yaml.safe_load(recipe.read_text(encoding="utf-8")).get("data_dir") if recipe.is_file() else None
    if not data_dir:
        return []
    try:
        return ["--data_dir", str(MULTI30K / (REPO / data_dir).resolve().relative_to(RECIPES_MULTI30K.resolve()))]
    except ValueError:  # not below ../shared/data/multi30k
        return []


COMMANDS = [c for c in readme_commands() if script_and_arguments(c) is not None]


def test_the_readme_shows_commands():
    assert any("scripts/train.py" in c for c in COMMANDS) and any("accelerate launch" in c for c in COMMANDS)
    assert "python -m pytest" in readme_commands()
    assert all((REPO / "scripts" / script_and_arguments(c)[0]).is_file() for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_parses(command, monkeypatch, capsys, tmp_path):
    script, arguments = script_and_arguments(command)
    if "multi30k" in command and not MULTI30K.is_dir():
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    monkeypatch.chdir(tmp_path)  # relative output folders land here; data paths fall back to the repository
    module = cli_module(script)
    if module is None:  # not a wrapper of a tool: it must at least start
        proc = subprocess.run(
            [sys.executable, str(REPO / "scripts" / script), "--help"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
    elif script == "train.py":
        code = module.main([*arguments, *multi30k_data_dir(arguments), "--check"])
        assert code == 0, f"{command}\n{capsys.readouterr().err}"
    else:  # parsed as on the machine the command is for: a `--device cuda` example needs a GPU to be there
        import torch

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        module.build_parser().parse_args(arguments)  # a UsageError names the option


def test_the_results_table_gives_one_figure_and_a_link_a_row():
    """The README reads in one pass: each row of its results table gives one figure (in bold) and one link to the
    result file that holds how it was measured; the caveats live there (benchmarks/results)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Results\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what")]
    assert len(rows) >= 5, section
    for row in rows:
        result = row.rstrip(" |").rsplit(" | ", 1)[1]
        links = re.findall(r"\]\(([^)]+)\)", result)
        assert len(re.findall(r"\*\*[^*]+\*\*", result)) == 1 and len(links) == 1, row
        assert (REPO / links[0]).is_file() and len(result) <= 160, row
