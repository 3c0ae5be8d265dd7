"""The README cannot drift from the command-line tools: every command in its shell code blocks parses.

A command `[ENV=1] [accelerate launch OPTIONS] python scripts/X.py ARGS [> FILE]` is parsed by the parser of the tool
that `scripts/X.py` runs (`vaswani_hf.cli.<tool>.build_parser()`): unknown options, wrong types and missing required
options fail here. `scripts/train.py` commands go further: they run with `--check` (recipe, keys, types, data paths
and the output folder validated, nothing written; run from an empty folder, so that a user's earlier outputs/ do
not matter). Both in-process: no interpreter per command. A command that reads Multi30k reads it where conftest says
($VASWANI_MULTI30K_DIR, else ../shared/data/multi30k) and is skipped where it is absent.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
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
    """The vaswani_hf.cli module a thin scripts/ wrapper runs (`from vaswani_commands import <tool> as main`, the tool's
    module in `vaswani_commands.TOOLS`), or None for a script that is not a wrapper."""
    import importlib

    import vaswani_commands

    found = re.search(r"from vaswani_commands import (\w+) as main", (REPO / "scripts" / script).read_text())
    return importlib.import_module(vaswani_commands.TOOLS[found.group(1)]) if found else None


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
    assert all((REPO / "scripts" / script_and_arguments(c)[0]).is_file() for c in COMMANDS)


def set_up_commands() -> list[str]:
    """The commands of the first ```bash block of the README's Set-up section, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Set-up[^\n]*\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def make_dry_run(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET VENV=venv` would run (make -n), one a line."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # Under `make test`, the outer make's settings (MAKEFLAGS, and VENV or PYTEST_ARGS given to it) are not these.
    ours = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VENV", "PYTHON", "TORCH", "ARGS", "PYTEST_ARGS")
    env = {k: v for k, v in os.environ.items() if k not in ours}
    argv = ["make", "-n", "--no-print-directory", target, f"VENV={venv}"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_set_up_is_two_commands_the_makefile_s_targets_and_ci_runs_the_second(tmp_path):
    """The README's first screen shows exactly `make train` and `make test`. On a machine without the environment,
    each creates it, installs torch first and then the package, and runs the main job or the suite; with the
    environment installed it only runs them, and a changed pyproject.toml installs again. `.ci/run` ends with the
    README's test command."""
    assert set_up_commands() == ["make train", "make test"]
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert re.findall(r"^## (.*)$", "\n".join(readme), re.M)[0].startswith("Set-up")
    first_screen = readme[:24]  # a terminal's height
    assert all(any(line.startswith(command) for line in first_screen) for command in ("make train", "make test"))
    venv = tmp_path / "venv"
    runs = {"train": f"{venv}/bin/python scripts/train.py", "test": f"{venv}/bin/python -m pytest"}
    for target, command in runs.items():
        fresh = make_dry_run(target, venv)
        assert fresh[0] == f"python3 -m venv {venv}" and fresh[-1].rstrip().endswith(command), fresh
        installs = [line for line in fresh if " pip install " in line]
        assert "torch==2.13.0" in installs[-2] and installs[-1].endswith('-e ".[dev]"'), installs
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".installed").touch()
    pyproject = (REPO / "pyproject.toml").stat().st_mtime
    os.utime(venv / ".installed", (pyproject + 60, pyproject + 60))
    assert [line.rstrip() for line in make_dry_run("test", venv)][-1].endswith(runs["test"])
    assert len(make_dry_run("test", venv)) == 1  # installed and up to date: nothing but the suite
    os.utime(venv / ".installed", (pyproject - 60, pyproject - 60))
    again = make_dry_run("train", venv)
    assert not any(" -m venv " in line for line in again) and any('-e ".[dev]"' in line for line in again), again
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert [line for line in ci if line and not line.startswith("#")][-1] == 'make test VENV="$venv"'


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
