"""Build recipes, which hold every setting of a training run, each declared once as a dataclass field with its
default, meaning and range.

A recipe is a YAML file of keys (`recipes/*.yaml`, or any path) whose values override the declared defaults (the
paper's base model, Section 5 and Table 3); any key can be overridden again on the command line (`--dropout 0.2`). Each
key is declared once, beside what consumes it. The run's keys are dataclass fields (`field(default=0.1,
metadata={"help": ..., "min": 0})`) in the sections of `vaswani_hf.training.recipe_keys`, as transformers'
`TrainingArguments` declares its own; the model's keys are `VaswaniConfig`'s settings declared with `recipe: True`.
From the declarations come the command line (`vaswani_hf.cli.train`), `--list-keys`, and `load_recipe`, the one way a
recipe is built, which refuses unknown keys, wrong types, values out of range and contradictory keys with the file or
key named, before anything is loaded. A value is checked once, where it enters: a run key against its declaration
(`check_value`), and the model keys by building the recipe's `VaswaniConfig` (`Recipe.config`, which the run then
trains). Each error names the file or flag the value came from. What the recipe means for a run on this machine is
resolved once, by `vaswani_hf.training.plan`.

Where the paper is silent, defaults follow tensor2tensor's first release (t2t v1) and say so.
"""

import difflib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..configuration_vaswani import SettingError, VaswaniConfig, shown
from ..errors import UsageError, one_line
from .recipe_files import read_yaml_mapping, read_yaml_text
from .recipe_keys import MODEL_KEYS, SECTIONS, SETTINGS, ModelKeys  # noqa: F401 - the keys are read from here too

# `vaswani_hf/recipes` is a link to the repository's `recipes/`, so that a built wheel carries the recipes as package
# data (pyproject.toml) and `--recipe NAME` works from an installed package too.
RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parents[2]
NULLS = ("null", "none", "~")  # These command-line words mean None, in any case.


class RecipeError(UsageError):
    """Report an invalid recipe (a YAML file or a command-line override), before any data is read or model built."""


class Recipe(Mapping):
    """Hold a checked recipe: every key's value, read as `recipe.d_model` or `recipe["d_model"]`, and `config`, the
    `VaswaniConfig` its model keys describe (with the BPE's vocab_size). It is a read-only mapping of all keys, so
    `dict(recipe)` and `yaml.safe_dump(dict(recipe))` give the full recipe. Build one with `load_recipe`."""

    def __init__(self, values: Mapping[str, Any], name: str = "custom", file: str | None = None, config=None):
        self._values = {name: values[name] for name in SETTINGS}
        self.name, self.file, self.config = name, file, config

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in SETTINGS:
            raise AttributeError(name)
        return self._values[name]

    def __getitem__(self, name: str):
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Recipe({self.name!r}, {self._values!r})"


def defaults() -> dict[str, Any]:
    """Return every key with its default."""
    return {name: list(s.default) if isinstance(s.default, list) else s.default for name, s in SETTINGS.items()}


# ---------------------------------------------------------------------------------------------------------------------
# Values: the keys' declarations check YAML values, programmatic overrides and command-line text
# ---------------------------------------------------------------------------------------------------------------------


def check_value(name: str, value: Any, where: str) -> Any:
    """Return `value` for run key `name`, checked against its declaration where it enters (an int is taken as a float
    where a float is declared), or raise RecipeError naming `where` (a file, `--key`) and the key. A model key is
    checked by the config it builds (`model_config`), not here."""
    if name not in SETTINGS:
        raise unknown_keys([name], where)
    if name in MODEL_KEYS:
        return value
    try:
        SETTINGS[name].check(value, where)
    except SettingError as error:
        raise RecipeError(str(error)) from None
    return float(value) if SETTINGS[name].type is float and type(value) is int else value


def value_from_text(name: str, text: str) -> Any:
    """Return the Python value of a command-line value (text), parsed as the key's declaration parses it
    (`Setting.read`). The text `null` gives None, true and false give booleans, and lists are written in YAML syntax.
    Text that spells no value of the key's type raises RecipeError. The range is checked once, when the recipe is built (`load_recipe`)."""
    if name not in SETTINGS:
        raise unknown_keys([name], "command line")
    where, declared = f"--{name}", SETTINGS[name]
    if declared.type is list:
        return read_yaml_text(text, where, RecipeError) if text.lstrip().startswith("[") else [text]
    try:
        return declared.read(text, where, none=NULLS if declared.nullable else ())
    except SettingError as error:
        raise RecipeError(str(error)) from None


def unknown_keys(names: Sequence[str], where: str) -> RecipeError:
    option = where == "command line"
    hints = []
    for name in names:
        close = difflib.get_close_matches(name, list(SETTINGS), n=1)
        shown_name, guess = (
            (f"--{name}", f"--{close[0]}" if close else "")
            if option
            else (shown(name), repr(close[0]) if close else "")
        )
        hints.append(shown_name + (f" (did you mean {guess}?)" if guess else ""))
    kind = "unknown option" if option else f"{where}: unknown recipe key"
    return RecipeError(
        f"{kind}{'s' if len(names) > 1 else ''} {', '.join(hints[:5])}. Valid recipe keys: "
        f"{', '.join(sorted(SETTINGS))} (`--list-keys` explains each)"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Rules between keys, and the model the keys describe
# ---------------------------------------------------------------------------------------------------------------------


def check_rules(recipe: Recipe) -> Recipe:
    """Check the rules that involve several run keys, and raise a RecipeError naming the keys of a broken one. The
    rules between model keys are checked by the model's config instead (`model_config`). The values are already in range (`check_value`)."""
    r = recipe
    if r.max_steps <= 0 and r.num_train_epochs <= 0:
        raise RecipeError("set max_steps > 0 or num_train_epochs > 0")
    if r.src_lang == r.tgt_lang or not r.src_lang.strip() or not r.tgt_lang.strip():
        raise RecipeError(
            f"src_lang and tgt_lang must be two different language codes, got {shown(r.src_lang)} and "
            f"{shown(r.tgt_lang)}"
        )
    for name in ("gradient_accumulation_steps", "max_tokens_per_device"):
        if r[name] == "auto" and r.tokens_per_step <= 0:
            raise RecipeError(f"{name}: auto needs tokens_per_step > 0 (paper: 25000)")
    if r.max_tokens_per_device == "auto" and r.gradient_accumulation_steps != "auto":
        raise RecipeError(
            "max_tokens_per_device: auto chooses the accumulation too: set gradient_accumulation_steps: auto"
        )
    if r.max_tokens_per_device != "auto":  # auto's number is checked by the same rule when the run is planned.
        check_length_fits(r.max_tokens_per_device, r.max_length)
    if r.average_last > 1 and 0 < r.keep_last < r.average_last:
        raise RecipeError(
            f"average_last={r.average_last} needs keep_last >= {r.average_last} (or 0: keep all); got "
            f"keep_last={r.keep_last}"
        )
    if r.eval_steps > 0 and r.valid_data is None:
        raise RecipeError("eval_steps > 0 needs valid_data (a dev set); set eval_steps 0 or give valid_data")
    if r.bf16 is True and r.fp16:  # bf16: auto with fp16: true means fp16 (training.plan).
        raise RecipeError("choose at most one of bf16 and fp16")
    if r.data_format == "hub" and not r.hub_dataset:
        raise RecipeError("data_format hub needs hub_dataset (e.g. wmt14) and usually hub_config (e.g. de-en)")
    check_report_to(r.report_to)
    return recipe


def model_config(values: Mapping[str, Any], origins: Mapping[str, str]) -> VaswaniConfig:
    """Return the `VaswaniConfig` of a recipe's model keys. Building it checks each key once, as any config's values
    are checked, and the rules between them; a failure raises RecipeError naming the file or flag the value came
    from (`origins`), and a rule between keys names where each of its keys came from. The config's vocab_size is
    the BPE's, which was already checked as the recipe key `vocab_size` (a narrower range), so it is set without a
    second check; `plan.ModelPlan.config_for` later gives it the trained tokenizer's."""
    try:
        config = VaswaniConfig(**{name: values[name] for name in MODEL_KEYS})
    except SettingError as error:
        if error.name in MODEL_KEYS:
            raise RecipeError(f"{origins.get(error.name, 'recipe')}: {error.name} {error.phrase}") from None
        # A rule between settings names no one of them: say where each setting it names came from.
        named = [key for key in MODEL_KEYS if values[key] is not None and re.search(rf"\b{key}\b", str(error))]
        where = ", ".join(f"{key} from {origins.get(key, 'recipe')}" for key in named)
        raise RecipeError(f"model settings ({where}): {one_line(error)}" if where else one_line(error)) from None
    except (ValueError, TypeError) as error:
        raise RecipeError(f"model settings: {one_line(error)}") from None
    config.vocab_size = values["vocab_size"]
    return config


def check_length_fits(max_tokens: int, max_length: int | None, *, auto: bool = False) -> None:
    """Check that a training pair of `max_length` tokens fits one micro-batch of `max_tokens` padded tokens, since
    otherwise no batch could hold it. Otherwise raise RecipeError naming the keys; a number in the
    recipe is refused when the recipe is loaded, and `auto`'s number (`budget.tokens_per_device`) when the run is
    planned."""
    if max_length is None or max_tokens >= max_length:
        return
    if auto:
        raise RecipeError(
            f"max_tokens_per_device: auto gives {max_tokens} tokens per micro-batch here, below "
            f"max_length {max_length}; lower max_length or give max_tokens_per_device"
        )
    raise RecipeError(
        f"max_tokens_per_device {max_tokens} is below max_length {max_length}: a training pair of "
        "max_length tokens would not fit one micro-batch; raise max_tokens_per_device or lower "
        "max_length"
    )


def check_report_to(value: str) -> None:
    """Check that report_to names Trainer integrations that are installed ("none", "all", or a comma-separated
    list), and raise RecipeError otherwise."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names in (["none"], ["all"]):
        return
    from transformers.integrations import get_available_reporting_integrations
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    available = set(get_available_reporting_integrations())
    for name in names or [""]:
        if name not in INTEGRATION_TO_CALLBACK:
            raise RecipeError(
                f"report_to: unknown integration {shown(name)}; known: none, all, "
                f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}"
            )
        if name not in available:
            raise RecipeError(
                f"report_to {name}: the integration is not installed (`pip install {name}`), or use report_to none"
            )


# ---------------------------------------------------------------------------------------------------------------------
# Building a recipe: YAML file + overrides -> Recipe (the one way)
# ---------------------------------------------------------------------------------------------------------------------


def list_recipes() -> list[str]:
    """Return the names of the recipes bundled in `recipes/`."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike) -> Path:
    """Return the path of a recipe's file, from a bundled recipe's name (`default`, `wmt14-en-de-base`, ...) or a path
    to a YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise RecipeError(f"recipe file not found: {p}" if not p.exists() else f"recipe {p} is not a file")
        return p
    candidate = RECIPES_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise RecipeError(
            f"unknown recipe {shown(str(name_or_path))}; bundled recipes: {', '.join(list_recipes())} "
            "(or pass a path to a .yaml file)"
        )
    return candidate


def read_recipe_file(path: Path) -> dict[str, Any]:
    """Return the key/value pairs of a recipe file, not yet merged with the defaults, with the run keys checked. The
    model keys are checked later, when `model_config` builds the recipe's config."""
    data = read_yaml_mapping(path, RecipeError)
    unknown = [k for k in data if k not in SETTINGS]
    if unknown:
        raise unknown_keys([str(k) for k in unknown], str(path))
    return {k: check_value(k, v, str(path)) for k, v in data.items()}


def load_recipe(name_or_path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Recipe:
    """Build a recipe, the one way: from a bundled name or a YAML file, then `overrides` (typed values, or text as on
    the command line), checking every value once where it enters and every rule. Without a name, the recipe is
    `default`, or, when `overrides` resume a run, the run's own OUTPUT_DIR/recipe.yaml, so that it goes on as
    planned. Paths are not looked at here:
    `vaswani_hf.training.plan` resolves them. Raises RecipeError naming the file or key."""
    path, given = recipe_path(name_or_path or "default"), {}
    for name, value in (overrides or {}).items():
        if name not in SETTINGS:
            raise unknown_keys([name], "overrides")
        if isinstance(value, str) and SETTINGS[name].type is not str:
            value = value_from_text(name, value)
        given[name] = check_value(name, value, f"--{name}")
    values = {**defaults(), **read_recipe_file(path), **given}
    name, file, saved = path.stem, str(path), Path(values["output_dir"]) / "recipe.yaml"
    if name_or_path is None and values["resume"] and saved.is_file():  # Else the run rewrites its recipe.yaml.
        own = {**defaults(), **read_recipe_file(saved), **given, "output_dir": values["output_dir"], "resume": True}
        values, name, file = own, str(saved), None
    # Where each value came from, for the errors of the model's config.
    origins = {
        **dict.fromkeys(values, file or name),
        **{key: f"--{key}" for key in given},
    }

    recipe = check_rules(Recipe(values, name, file))
    recipe.config = model_config(values, origins)
    return recipe
