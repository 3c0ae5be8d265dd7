"""Read recipe YAML safely, with bounded work on any input and one value per key.

PyYAML's safe loader builds plain data only, but it still expands aliases: a 1 KB file of nested aliases ("billion
laughs") describes billions of nodes, and rendering such a value in an error message never ends. A recipe is a flat
mapping of keys to scalars and short lists, so the loader here refuses any alias, and files larger than any real
recipe, with one line naming the file. PyYAML also keeps the last of a key given twice, silently (YAML 1.2 forbids
duplicate keys): the loader here refuses it, naming the key and both lines. The values' types and bounds are the
recipe keys' own declarations (`vaswani_hf.training.recipe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_RECIPE_BYTES = 1 << 20  # A real recipe is a few kilobytes.


class _NoAliasLoader(yaml.SafeLoader):
    """Load YAML as yaml.SafeLoader does, but refuse aliases (`*name`): a recipe needs none, and they are how a tiny
    file expands into an enormous value."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in "
                "a recipe; write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        """Build a mapping whose keys are given once; the second of two equal keys is refused, naming both lines."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    hash(key)
                except TypeError:  # For an unhashable key, PyYAML's own error follows.
                    continue
                if key in seen:
                    raise yaml.YAMLError(
                        f"line {line}: key {key!r} is given twice (first on line {seen[key]}); keep one"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml_text(text: str, where: str, error: type[Exception] = ValueError) -> Any:
    """Parse YAML `text` (a recipe or a command-line value) without aliases; on failure, raise `error` at `where`."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - it is a SafeLoader subclass
    except yaml.YAMLError as problem:
        raise error(f"{where}: invalid YAML: {' '.join(str(problem).split())[:300]}") from None
    except RecursionError:
        raise error(f"{where}: YAML nested too deeply") from None


def read_yaml_mapping(path: Path, error: type[Exception]) -> dict[str, Any]:
    """Return the mapping a recipe file holds, or raise `error` naming the file if it is not found, too large, not
    UTF-8, invalid YAML (aliases included), not a mapping, or empty. An empty file is refused because it would
    silently train with the code defaults: the base model's 100k updates into outputs/run, which no one asks for by
    writing nothing."""
    try:
        size = path.stat().st_size
        if size > MAX_RECIPE_BYTES:
            raise error(f"{path}: {size:,} bytes is not a recipe (a recipe is a short YAML mapping of keys to values)")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text; save the recipe as UTF-8") from None
    except OSError as problem:
        raise error(f"recipe {path}: {problem.strerror or problem}") from None
    data = read_yaml_text(text, str(path), error)
    if data is None or data == {}:  # Nothing, blanks, comments, `---`, `null` and `{}` hold no keys.
        raise error(
            f"{path} is empty (no keys); a recipe needs at least one key (output_dir, data and model keys: "
            "see --list-keys); to start from the bundled defaults pass --recipe default"
        )
    if not isinstance(data, dict):
        raise error(f"{path}: a recipe is a mapping of keys to values, got {type(data).__name__}")
    return data
