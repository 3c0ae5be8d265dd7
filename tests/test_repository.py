"""Guards on the repository itself: Multi30k (research-only licence) is read at run time, never committed; the Hub
code files import only what trust_remote_code provides; the wheel carries the recipes and the sample corpus; modules
(package, scripts and tests) and functions stay short; the code is as ruff formats it and its linter is clean; no
script shadows a library."""

import ast
import io
import re
import subprocess
import tokenize

import pytest
from conftest import MULTI30K, REPO


def tracked_text_files():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in listed.stdout.split():
        path = REPO / name
        try:
            yield name, path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue


def test_no_multi30k_sentence_is_committed():
    files = [p for p in MULTI30K.rglob("*") if p.is_file()] if MULTI30K.is_dir() else []
    if not files:
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    corpus = set()
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip().lower()
            if len(line.split()) >= 4:  # short phrases ("a dog runs .") may coincide by chance
                corpus.add(line)
    quoted = re.compile(r"\"([^\"\n]{12,})\"|'([^'\n]{12,})'")
    found = []
    for name, text in tracked_text_files():
        for number, line in enumerate(text.splitlines(), 1):
            candidates = [line.strip().lower()] + [(a or b).strip().lower() for a, b in quoted.findall(line)]
            if any(candidate in corpus for candidate in candidates):
                found.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not found, "Multi30k text in tracked files:\n" + "\n".join(found)


HUB_CODE_FILES = [
    "configuration_vaswani.py",
    "modeling_vaswani.py",
    "generation_vaswani.py",
    "generation_config_vaswani.py",
    "validation_vaswani.py",
    "beam_search_vaswani.py",
    "pipeline_vaswani.py",
]


@pytest.mark.parametrize("name", HUB_CODE_FILES)
def test_hub_code_files_import_only_torch_transformers_and_each_other(name):
    """These files are copied next to the weights and run with trust_remote_code where vaswani_hf is not installed:
    they may import the standard library, torch, transformers (and huggingface_hub, which transformers requires),
    and each other through relative imports -- nothing else."""
    import ast
    import sys

    tree = ast.parse((REPO / "vaswani_hf" / name).read_text(encoding="utf-8"))
    allowed = {"torch", "transformers", "huggingface_hub"} | set(sys.stdlib_module_names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 0:  # relative: must be another Hub code file
                assert f"{node.module}.py" in HUB_CODE_FILES, f"{name}:{node.lineno} imports .{node.module}"
                continue
            modules = [node.module]
        else:
            continue
        for module in modules:
            assert module.split(".")[0] in allowed, f"{name}:{node.lineno} imports {module}"


def test_wheel_carries_the_recipes_and_the_sample_corpus(tmp_path):
    """`--recipe NAME` and the default recipe's sample corpus must work from an installed wheel, not only from a
    clone: the built wheel holds every recipe of `recipes/` (through the `vaswani_hf/recipes` link) and the corpus."""
    import sys
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(REPO),
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("vaswani_hf-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = sorted(p.name for p in (REPO / "recipes").glob("*.yaml"))
    assert recipes and all(f"vaswani_hf/recipes/{name}" in names for name in recipes), recipes
    assert {"vaswani_hf/sample_data/train.en", "vaswani_hf/sample_data/train.de"} <= names
    assert "vaswani_commands.py" in names  # the commands' runner, which every console script names


def _python_files(*folders: str):
    for folder in folders:
        yield from sorted((REPO / folder).rglob("*.py"))


# What counts against the limits below: the lines that hold code. Docstrings, comments and blank lines never do, so that
# no reason, docstring or blank line is ever removed to fit a count.
MODULE_LIMIT = 500  # code lines: a module is one job
FUNCTION_LIMIT = 80  # code lines: a function is one step
# Where one job is longer than a limit, the limit gives way, with the reason.
LONGER_MODULES = {
    "vaswani_hf/modeling_vaswani.py": (
        800,
        "the model itself, the paper's Sections 3.1-3.5 (attention, the sublayers, embeddings, positions, the encoder "
        "and decoder stacks, the seq2seq model and the decoder stack alone, VaswaniForCausalLM, which share every "
        "layer) in one file, as transformers keeps each of its models in one modeling file that reads top to bottom "
        "and is copied next to the weights",
    ),
    "vaswani_hf/training/recipe.py": (
        650,
        "the recipe: its seven sections declare each of the 76 recipe keys once, with its help, default and range "
        "(a few lines of code a key), and read a recipe file and the flags into them; splitting the declarations from "
        "their reading would again send every key through two files on its way to the run",
    ),
}
_NO_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def code_lines(tree: ast.Module, text: str) -> set[int]:
    """Return the numbers of the lines of `text` that hold code: not blank, not only a comment, not a docstring."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in _NO_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - docstrings


def test_code_lines_leave_out_prose():
    text = (
        'def f(x):\n    """One step.\n\n    Why, at length.\n    """\n\n    # a reason\n    return x  # and another\n'
    )
    assert sorted(code_lines(ast.parse(text), text)) == [1, 8]


def test_modules_and_functions_stay_short():
    """The house rules (CONTRIBUTING.md): a module does one job in at most 500 lines of code and a function one step
    in at most 80, for the package, the scripts and the tests alike (test files, conftest.py and the test helpers).
    Only code counts (`code_lines`); a module whose one job is longer has its own limit and reason in
    `LONGER_MODULES`."""
    too_long = []
    for path in _python_files("vaswani_hf", "scripts", "tests"):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        lines = code_lines(tree, text)
        name = path.relative_to(REPO).as_posix()
        limit = LONGER_MODULES.get(name, (MODULE_LIMIT, ""))[0]
        if len(lines) > limit:
            too_long.append(f"{name}: {len(lines)} lines of code (limit {limit})")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = sum(node.lineno <= line <= node.end_lineno for line in lines)
                if count > FUNCTION_LIMIT:
                    too_long.append(
                        f"{name}:{node.lineno} {node.name}: {count} lines of code (limit {FUNCTION_LIMIT})"
                    )
    assert not too_long, "\n".join(too_long)
    for name, (limit, why) in LONGER_MODULES.items():
        assert (REPO / name).is_file() and limit > MODULE_LIMIT and why, name


def ruff(*args: str) -> subprocess.CompletedProcess:
    """ruff, as pinned by the dev extra, over the whole checkout (its settings: pyproject.toml)."""
    try:
        return subprocess.run(["ruff", *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        pytest.fail('ruff is not installed: pip install -e ".[dev]" installs the pinned version')


def test_code_is_as_the_formatter_writes_it():
    """Every Python file is as `ruff format` writes it (119 columns, transformers' line length): no packed lines,
    and no reformatting noise in anyone's diff. Fix with `ruff format .`."""
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, f"run `ruff format .`:\n{result.stdout}{result.stderr}"


def test_linter_is_clean():
    """`ruff check .` passes: unused and redefined names, import order, pyupgrade (the rules: pyproject.toml)."""
    result = ruff("check", "--output-format", "concise", ".")
    assert result.returncode == 0, f"run `ruff check --fix .`, then fix the rest by hand:\n{result.stdout}"


def test_no_script_shadows_a_library():
    """`python scripts/X.py` puts scripts/ first on sys.path: a script named like an installed module (e.g. the
    `evaluate` library that vaswani_hf.metrics.scores imports) would be imported instead of it."""
    import importlib.util

    shadows = [p.name for p in (REPO / "scripts").glob("*.py") if importlib.util.find_spec(p.stem) is not None]
    assert not shadows, shadows


IMPORT_CHECK = r"""
import os, signal, sys

def state():
    def descriptor(fd):
        try:
            status = os.fstat(fd)
            return (status.st_dev, status.st_ino, status.st_mode)
        except OSError:
            return "closed"
    return ([str(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)],
            [descriptor(fd) for fd in (0, 1, 2)], os.getcwd(), dict(os.environ), os.umask(0o022))

import torch, transformers.modeling_utils, transformers.pipelines  # what they do at import is theirs
before = state()
import vaswani_hf
after = state()
loaded = sorted(m for m in sys.modules if m.startswith("vaswani_hf.cli") or m == "vaswani_commands")
print(repr((before == after, loaded, before[1], after[1])), file=sys.stderr)
"""


def test_importing_the_package_leaves_the_process_alone(tmp_path):
    """`import vaswani_hf` registers the classes and does nothing else: no command machinery loaded (vaswani_hf.cli,
    the runner vaswani_commands), and the signal handlers, the standard descriptors (standard input closed here), the
    working folder, the environment and the umask are as before (after torch and transformers were imported: what
    they change is theirs). The process is the commands' runner's."""
    import ast
    import os
    import sys

    result = subprocess.run(
        ["sh", "-c", 'exec "$0" -c "$1" <&-', sys.executable, IMPORT_CHECK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    same, loaded, before, after = ast.literal_eval(result.stderr.strip().splitlines()[-1])
    assert before[0] == "closed" and (same, loaded) == (True, []), (before, after, loaded)


def test_no_library_module_imports_the_command_boundary():
    """Only the commands (vaswani_hf/cli/, and the Space's page, a server run as a command) import the command
    boundary (vaswani_hf.cli) and the runner (vaswani_commands): the library never reaches up to them."""
    import ast
    from importlib.util import resolve_name

    upward = []
    for path in _python_files("vaswani_hf"):
        relative = path.relative_to(REPO)
        if relative.parts[1] == "cli" or relative.as_posix() == "vaswani_hf/space/page.py":
            continue
        package = ".".join(relative.parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = resolve_name("." * node.level + (node.module or ""), package)
                names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            else:
                continue
            if any(
                name.split(".")[:2] == ["vaswani_hf", "cli"] or name.split(".")[0] == "vaswani_commands"
                for name in names
            ):
                upward.append(f"{relative}:{node.lineno}")
    assert not upward, upward
