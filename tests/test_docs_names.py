"""The documentation names only what exists: every module, file, class, function and attribute that
docs/architecture.md and the README's layout section mention is found in the code. The names are parsed from the
pages (spans in backticks, the diagrams' node and edge labels, the layout's file and folder names), never listed
here, so a page that gains a name is checked with it, and a rename that forgets a page fails here.

How a name is found: a path (`training/plan.py`, `metrics/`) is a file or folder of the repository ending so; a
dotted name starts with one of the package's modules named by its tail (`io.check_paths`, `plan.plan_run`,
`cli.contract.run_cli`), a name defined in the package (`VaswaniTrainer`, `VaswaniConfig.base`) or a library the
package builds on (`Seq2SeqTrainer`, `Dataset.map`), and each further part is an attribute of it; where it goes on
through an instance (`plan.recipe.optimization.warmup_steps`), each further part is an attribute some class of the package
declares. A bare lower-case word is a name defined in the package, or a key the code writes or reads
(`auto_map`, a recipe key). Values, flags and shell words (`--resume`, `"gnmt"`, `checkpoint-N`) are not names.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIBRARIES = ("transformers", "datasets", "accelerate", "huggingface_hub", "torch", "evaluate", "safetensors")


@cache
def repository_paths() -> frozenset[str]:
    """Every tracked file of the repository and every folder above one, relative, with "/"-separated parts."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = set(files)
    for name in files:
        parts = name.split("/")
        found |= {"/".join(parts[:i]) for i in range(1, len(parts))}
    return frozenset(found)


def path_exists(path: str) -> bool:
    """A repository path ending with `path` (`plan.py`, `training/plan.py`, `benchmarks/results/`)."""
    tail = path.strip("/")
    return any(p == tail or p.endswith("/" + tail) for p in repository_paths())


@cache
def modules() -> dict[str, Path]:
    """{dotted name: file} of the package's modules, the runner and the tests' helper modules (`tests.<name>`)."""
    found = {"vaswani_commands": REPO / "vaswani_commands.py"}
    for path in (REPO / "vaswani_hf").rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in (REPO / "tests").glob("*.py"):
        found[f"tests.{path.stem}"] = path
    return found


@cache
def declared_names() -> tuple[frozenset[str], frozenset[str]]:
    """(every name the package's code defines: functions, classes, module and class attributes, dataclass fields,
    `self.x` attributes, keyword parameters; every identifier-like string it writes or reads, e.g. JSON keys)."""
    names, strings = set(), set()
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names |= {a.arg for a in (*node.args.args, *node.args.kwonlyargs)}
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings |= set(re.findall(r"\b[A-Za-z_]\w*\b", node.value))
    return frozenset(names), frozenset(strings)


def _modules_named(prefix: str) -> list[str]:
    return [name for name in modules() if name == prefix or name.endswith("." + prefix)]


def _import(module: str):
    """A module of `modules()`; the tests' helper modules by their own name (tests/ is on the path, no package)."""
    return importlib.import_module(module.removeprefix("tests."))


def _walk(obj, rest: list[str]) -> bool:
    """Each of `rest` an attribute of `obj` in turn; past an instance attribute, any attribute the code declares."""
    for i, part in enumerate(rest):
        if not hasattr(obj, part):
            return all(name in declared_names()[0] for name in rest[i:])
        obj = getattr(obj, part)
    return True


def name_exists(name: str) -> bool:
    """Whether the dotted `name` is found as the module docstring says."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        for module in _modules_named(".".join(parts[:i])):
            if _walk(_import(module), parts[i:]):
                return True
    first, rest = parts[0], parts[1:]
    if first in declared_names()[0]:
        for module in (m for m in modules() if not m.startswith("tests.")):  # a name the package defines
            loaded = importlib.import_module(module)
            if hasattr(loaded, first) and _walk(getattr(loaded, first), rest):
                return True
    for library in LIBRARIES:
        loaded = importlib.import_module(library)
        if first == library and _walk(loaded, rest):
            return True
        if first[:1].isupper() and hasattr(loaded, first) and _walk(getattr(loaded, first), rest):
            return True
    if not rest:  # a name the code defines (anywhere, tests' helpers included), or a key it reads or writes
        names, strings = declared_names()
        return first in names or (first.islower() and (first in strings or hasattr(builtins, first)))
    return False


PATH = re.compile(r"^(?:[\w.-]+/)*[\w.-]+(?:\.py|/)$")
REFERENCE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\(.*\))?(?:\s*->\s*\w+)?$")
KEYWORD = re.compile(r"^([A-Za-z_]\w*)=\S")


def names_in_span(span: str) -> list[str]:
    """The names a backticked span mentions (see the module docstring): a path, a dotted name (called or not), the
    name of `name=value`; nothing for a value, a flag or a shell word."""
    span = span.strip()
    if not span or span[0] in "-\"'<[$0123456789" or span.startswith(("import ", "python ", "pip ")):
        return []
    if re.fullmatch(r"[\w./-]+\.(?:json|md|yaml|yml|txt|safetensors|bin|png|pth|pt|js|css|html|toml)", span):
        return [span] if "/" in span else []  # a file of the repository, or a data file's name (config.json)
    if PATH.match(span) and not any(part.isupper() for part in span.split("/")):
        return [span]
    if "/" in span:
        head, _, tail = span.partition(".")
        if re.fullmatch(r"[\w/]+", head) and re.fullmatch(r"[A-Za-z_][\w.]*", tail):  # tests/cli_contract.Cases
            return [head + ".py", head.replace("/", ".") + "." + tail]
        return []
    if match := KEYWORD.match(span):
        return [match.group(1)]
    match = REFERENCE.match(span)
    if match is None or match.group(1).isupper() and "." not in match.group(1) and len(match.group(1)) <= 2:
        return []
    return [match.group(1)]


def diagram_names(diagram: str) -> list[str]:
    """Names in a mermaid diagram: files and folders of node labels, the modules a folder node lists
    ("folder/<br/>a · b": folder/a.py or folder/a/), and the dotted names of edge labels (`|io.iter_lines|`)."""
    found = []
    for label in re.findall(r'\["(.*?)"\]', diagram):
        text = re.sub(r"<[^>]*>", " · ", label)
        folders = re.findall(r"\b\w+/(?![\w-])", text)
        found += re.findall(r"[\w/]+\.py|\b\w+/(?![\w-])", text)
        for word in (w.strip() for w in text.split("·")):
            if folders and re.fullmatch(r"[a-z_0-9]+", word):
                found.append(" or ".join(f"vaswani_hf/{folder}{word}" for folder in folders))
    for label in re.findall(r"\|([^|]+)\|", diagram):
        found += re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", label)
    return found


def exists(name: str) -> bool:
    """A name; a path (a repository path ending so); or one of several exact places ("vaswani_hf/io/text or ...": a
    folder node's module; "vaswani_hf/io/files.py or ...": a layout line's file)."""
    if " or " in name:
        return any(p.strip("/") in repository_paths() or f"{p}.py" in repository_paths() for p in name.split(" or "))
    if "/" in name or name.endswith(".py"):
        return path_exists(name) or path_exists(f"{name}.py")
    return name_exists(name)


def architecture_names() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    found = [name for diagram in re.findall(r"```mermaid\n(.*?)```", text, re.S) for name in diagram_names(diagram)]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return found + [name for span in re.findall(r"`([^`\n]+)`", prose) for name in names_in_span(span)]


def layout_names(block: str) -> list[str]:
    """The files and folders a layout block names, each as the places it may be: in the folder its line describes
    (`io/ ... (files.py)` is vaswani_hf/io/files.py; a line indented under "vaswani_hf/" describes one of its
    entries; a deeper-indented line continues the one above), in the block's top folder, in the package, or at the
    repository's top."""
    found, top, folder = [], "", ""
    for line in block.splitlines():
        indent, words = len(line) - len(line.lstrip()), line.split()
        if not words:
            continue
        head = words[0].rstrip(",")
        if indent == 0:
            top = folder = head if head.endswith("/") else ""
        elif indent <= 2:
            folder = top + head if head.endswith("/") else top
        for token in re.findall(r"[\w/]+\.py|(?<![\w./])\w+/", line):
            found.append(" or ".join(dict.fromkeys((folder + token, top + token, f"vaswani_hf/{token}", token))))
    return found


def readme_layout_names() -> list[str]:
    """The files and folders the README's layout block names, and the names in backticks around it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Layout\n(.*?)(?=^## )", text, re.S | re.M).group(1)
    found = layout_names(re.search(r"```\n(.*?)```", section, re.S).group(1))
    prose = re.sub(r"```.*?```", "", section, flags=re.S)
    return found + [name for span in re.findall(r"`([^`\n]+)`", prose) for name in names_in_span(span)]


@pytest.mark.parametrize(
    "page, names", [("docs/architecture.md", architecture_names), ("README.md", readme_layout_names)]
)
def test_every_name_the_page_mentions_exists(page, names):
    mentioned = names()
    assert len(mentioned) >= 20, f"{page}: the parser found only {mentioned}"
    absent = sorted({name for name in mentioned if not exists(name)})
    assert not absent, f"{page} mentions names the code does not have (rename or remove them there): {absent}"


def test_the_name_parser_reads_what_is_written():
    assert names_in_span("training/plan.py") == ["training/plan.py"]
    assert names_in_span("io.check_paths") == ["io.check_paths"]
    assert names_in_span("resolve(args) -> plan") == ["resolve"]
    assert names_in_span("number(int, min=1)") == ["number"]
    assert names_in_span('position_encoding="learned"') == ["position_encoding"]
    assert names_in_span("tests/cli_contract.Cases") == ["tests/cli_contract.py", "tests.cli_contract.Cases"]
    assert names_in_span("space/view.js") == ["space/view.js"]
    assert names_in_span("config.json") == []
    for value in ("--resume", '"gnmt"', "checkpoint-N", "OUTPUT/tokenizer", "import vaswani_hf", "<pad>", "eps/(V-1)"):
        assert names_in_span(value) == [], value
    assert diagram_names('x["io/<br/>text · outputs"]\n a -->|io.iter_lines| b') == [
        "io/",
        "vaswani_hf/io/text",
        "vaswani_hf/io/outputs",
        "io.iter_lines",
    ]
    assert (
        exists("io.check_paths") and exists("plan.recipe.optimization.warmup_steps") and exists("VaswaniConfig.base")
    )
    assert exists("Dataset.map") and exists("training/plan.py") and exists("vaswani_hf/io/text or vaswani_hf/x/text")
    assert not exists("io.no_such_function") and not exists("cli.surroundings.distributed_variables")
    assert not exists("training/no_such_module.py") and not exists("NoSuchClass") and not exists("datasets.map")
    assert not exists("vaswani_hf/files.py or files.py")  # exact places: io/files.py is neither
