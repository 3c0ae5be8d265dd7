"""docs/architecture.md's diagram of the house is the import graph: each node names the modules of a group (files and
folders of vaswani_hf/, e.g. `training/`, `inference.py`), each subgraph is a floor (the first at the top), and the
arrows between groups are exactly the imports between their modules (read with `ast`, function-local imports
included). No arrow points to a floor above, and the groups have no import cycle. The diagram is the one place to
update when a module or an import between groups changes."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "vaswani_hf"


def house_diagram() -> str:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return re.search(r"## The house\s+```mermaid\n(.*?)```", text, re.S).group(1)


def parse_diagram(diagram: str) -> tuple[dict[str, list[str]], dict[str, int], set[tuple[str, str]]]:
    """({node: the files and folders it names}, {node: its floor, 0 at the top}, {(from, to)})."""
    names, floors, arrows, floor = {}, {}, set(), -1
    for line in diagram.splitlines():
        line = line.strip()
        if line.startswith("subgraph "):
            floor += 1
        elif "-->" in line:
            sides = [[node.strip() for node in side.split("&")] for side in line.split("-->")]
            arrows |= {(a, b) for left, right in zip(sides, sides[1:]) for a in left for b in right}
        elif match := re.fullmatch(r'(\w+)\["(.*)"\]', line):
            label = re.sub(r"<[^>]*>", " ", match.group(2))
            names[match.group(1)] = re.findall(r"[\w/]+\.py|\w+/", label)
            floors[match.group(1)] = floor
    return names, floors, arrows


def modules() -> dict[str, Path]:
    """{dotted module name: file} of every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports (anywhere in its file)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                found.add(target)
    return found


def group_of(path: Path, names: dict[str, list[str]]) -> str | None:
    """The node whose most specific name covers `path` (a file named, or a folder it lies in)."""
    relative = path.relative_to(PACKAGE).as_posix()
    covering = [
        (len(item), node)
        for node, items in names.items()
        for item in items
        if relative == item or (item.endswith("/") and relative.startswith(item))
    ]
    return max(covering)[1] if covering else None


NAMES, FLOORS, ARROWS = parse_diagram(house_diagram())
MODULES = modules()


def test_every_module_is_in_one_group_and_every_name_exists():
    unplaced = sorted(str(path.relative_to(PACKAGE)) for path in MODULES.values() if group_of(path, NAMES) is None)
    assert not unplaced, f"modules in no node of docs/architecture.md's diagram (name them in a node): {unplaced}"
    absent = sorted(
        f"{node}: {item}" for node, items in NAMES.items() for item in items if not (PACKAGE / item).exists()
    )
    assert not absent, f"the diagram names files or folders that do not exist: {absent}"
    assert {node for node, _ in ARROWS} | {node for _, node in ARROWS} <= set(NAMES), "an arrow names no node"


def test_the_arrows_are_the_imports():
    """An import of the root package itself (`import vaswani_hf`) is no arrow: importing any of its modules runs
    vaswani_hf/__init__.py first; the root's own imports are the arrows of the node that names `__init__.py`."""
    code, example = set(), {}
    for name, path in MODULES.items():
        for target in imports(name, path, MODULES) - {"vaswani_hf"}:
            arrow = (group_of(path, NAMES), group_of(MODULES[target], NAMES))
            if arrow[0] != arrow[1]:
                code.add(arrow)
                example.setdefault(arrow, f"{name} imports {target}")
    undrawn = sorted(f"{a} --> {b} ({example[a, b]})" for a, b in code - ARROWS)
    assert not undrawn, f"imports between groups that docs/architecture.md does not draw: {undrawn}"
    assert not ARROWS - code, f"arrows drawn where no module imports the other: {sorted(ARROWS - code)}"


def test_no_arrow_points_up_and_the_groups_have_no_cycle():
    upward = sorted(f"{a} --> {b}" for a, b in ARROWS if FLOORS[a] > FLOORS[b])
    assert not upward, f"arrows to a floor above: {upward}"
    following = defaultdict(set)
    for a, b in ARROWS:
        following[a].add(b)
    done, path = set(), []

    def visit(node):
        if node in path:
            pytest.fail(f"import cycle between groups: {' --> '.join(path[path.index(node) :] + [node])}")
        if node not in done:
            path.append(node)
            for after in sorted(following[node]):
                visit(after)
            path.pop()
            done.add(node)

    for node in sorted(NAMES):
        visit(node)


def test_the_diagram_parser_reads_what_is_drawn():
    names, floors, arrows = parse_diagram(
        'subgraph top["a"]\n  x["x.py · y/<br/>about x"]\nend\nsubgraph low["b"]\n  z["z/"]\nend\n x & z --> z & x\n'
    )
    assert names == {"x": ["x.py", "y/"], "z": ["z/"]} and floors == {"x": 0, "z": 1}
    assert arrows == {("x", "z"), ("x", "x"), ("z", "z"), ("z", "x")}


def test_the_old_module_paths_import_the_modules_that_moved():
    """A module that moved into a wing keeps its old import path (users' code, earlier docs): the old name is the new
    module itself, so a monkeypatch through either name reaches the code that runs."""
    import importlib

    import vaswani_hf

    for old, new in vaswani_hf.MOVED_MODULES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert not (REPO / (old.replace(".", "/") + ".py")).exists(), f"{old} is both a file and an alias"
    from vaswani_hf import evaluation, inference  # the `from package import module` form too

    assert inference.translate is vaswani_hf.translate and evaluation.__name__ == "vaswani_hf.metrics.scores"
