"""Property tests of the declared value constraints, for every numeric flag of every command and every recipe key of
`vaswani-train`: a value that breaks its declaration (NaN, an infinity, below the minimum, above the maximum, a
huge integer, something that is not a number, a wrong YAML type) is refused before any work, in one stderr line
naming the flag or key (and the recipe file), with exit status 2 and nothing written; a value inside the declared
range is accepted by the value check (the bounds are not tighter than declared); a --device this machine lacks is
refused by every command that has the flag.

The flags are found by introspection (`build_parser()._actions` whose type carries the `.setting` it reads), the
recipe keys and their declarations from `vaswani_hf.training.recipe.SETTINGS`, so a flag or key added later is covered
without a new test.
"""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path

import pytest
import torch
import yaml
from cli_contract import TOOLS, changes, every_tool, run_main, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vaswani_hf.settings import Setting
from vaswani_hf.settings import device as device_type
from vaswani_hf.training.recipe import NULLS, SETTINGS, read_recipe_file, value_from_text

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

VALUE_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A command line of each tool that parses, and is refused after parsing (a missing input) without any work.
BASE_ARGV = {tool: case.refused for tool, case in every_tool().items()}
PARSED_TOOLS = [tool for tool in TOOLS if tool != "train"]  # train's flags are its recipe keys (below)


def parser_of(tool: str) -> argparse.ArgumentParser:
    return importlib.import_module(f"vaswani_hf.cli.{tool}").build_parser()


def flag_of(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


NUMERIC_FLAGS = [
    (tool, flag_of(a))
    for tool in PARSED_TOOLS
    for a in parser_of(tool)._actions
    if getattr(a.type, "setting", None) is not None
]
DEVICE_FLAGS = [(tool, flag_of(a)) for tool in PARSED_TOOLS for a in parser_of(tool)._actions if a.type is device_type]


def action_of(tool: str, flag: str) -> argparse.Action:
    return next(a for a in parser_of(tool)._actions if flag in a.option_strings)


def accepted_words(action: argparse.Action) -> tuple[str, ...]:
    """The word a flag takes besides numbers ('none' for translate's --max_length_b), if any."""
    try:
        return ("none",) if action.type("none") is None else ()
    except argparse.ArgumentTypeError:
        return ()


def kind_of(action: argparse.Action) -> type:
    return float if action.type.__name__ == "float" else int


def test_the_introspection_finds_the_flags():
    """The tables above are not empty by accident: the flags every user meets are among them."""
    assert {
        ("translate", "--num_beams"),
        ("evaluate", "--batch_size"),
        ("train_tokenizer", "--vocab_size"),
        ("average_checkpoints", "--last"),
        ("export_ctranslate2", "--max_positions"),
    } <= set(NUMERIC_FLAGS)
    assert {tool for tool, _ in DEVICE_FLAGS} == {"translate", "evaluate", "visualize_attention"}


# ---------------------------------------------------------------------------------------------------------------------
# Values that break a bound, and values inside it (an oracle written from the declaration, not from Setting.problem)
# ---------------------------------------------------------------------------------------------------------------------


def breaks(bound: Setting, value: float) -> bool:
    """Whether a number lies outside `bound` (or is not finite)."""
    if not math.isfinite(value):
        return True
    low = bound.min is not None and (value < bound.min or (bound.min_exclusive and value == bound.min))
    return low or (bound.max is not None and (value > bound.max or (bound.max_exclusive and value == bound.max)))


def out_of_bound_numbers(kind: type, bound: Setting) -> st.SearchStrategy:
    """Numbers of `kind` outside `bound`: beyond either end (ends included where exclusive), huge, not finite."""
    options = [st.sampled_from([10**30, -(10**30)] if kind is int else [math.nan, math.inf, -math.inf, 1e300])]
    for end, side in ((bound.min, "max_value"), (bound.max, "min_value")):
        if end is None:
            continue
        if kind is int:
            options.append(st.integers(**{side: math.floor(end) if side == "max_value" else math.ceil(end)}))
        else:
            options.append(st.floats(**{side: float(end)}, allow_nan=False))
    return st.one_of(options).filter(lambda v: breaks(bound, v))


def not_a_number(kind: type, allowed_words=()) -> st.SearchStrategy:
    """Text that `kind(text)` does not read (nor a word the flag accepts, like 'none')."""

    def unreadable(text: str) -> bool:
        try:
            kind(text)
        except ValueError:
            return text.lower() not in allowed_words
        return False

    fixed = [
        "",
        " ",
        "abc",
        "1,000",
        "0x10",
        "five",
        "1.5" if kind is int else "1.5.1",
        "1e3" if kind is int else "e3",
        "True",
        "[1]",
    ]
    characters = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
    return st.one_of(st.sampled_from(fixed), st.text(characters, max_size=12)).filter(unreadable)


def as_text(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def in_bound_numbers(kind: type, bound: Setting) -> st.SearchStrategy:
    """Numbers of `kind` inside `bound`, its inclusive ends among them."""
    low, high = bound.min, bound.max
    ends = [
        e
        for e, exclusive in ((low, bound.min_exclusive), (high, bound.max_exclusive))
        if e is not None and not exclusive and (kind is float or e == int(e))
    ]
    if kind is int:
        inner = st.integers(
            None if low is None else math.floor(low) + 1 if bound.min_exclusive else math.ceil(low),
            None if high is None else math.ceil(high) - 1 if bound.max_exclusive else math.floor(high),
        )
    else:
        inner = st.floats(
            low,
            high,
            exclude_min=bound.min_exclusive and low is not None,
            exclude_max=bound.max_exclusive and high is not None,
            allow_nan=False,
            allow_infinity=False,
        )
    return st.one_of(st.sampled_from([kind(e) for e in ends]), inner) if ends else inner


def padded(texts: st.SearchStrategy) -> st.SearchStrategy:
    """The texts, some with the whitespace that int() and float() skip around a number (a line break among it)."""
    space = st.sampled_from(["", "", " ", "\t", "\n", " \r\n"])
    return st.tuples(space, texts, space).map("".join)


# ---------------------------------------------------------------------------------------------------------------------
# Flags of the commands
# ---------------------------------------------------------------------------------------------------------------------


def assert_refused_in_one_line(tool: str, argv: list, names: tuple[str, ...], tmp_path: Path, capfd) -> None:
    """Exit status 2, one stderr line holding every one of `names`, no traceback, nothing under `tmp_path` written."""
    before = snapshot(tmp_path)
    capfd.readouterr()
    code, warned = run_main(tool, argv)
    _, err = capfd.readouterr()
    shown = f"{tool} {' '.join(map(str, argv))}\nexit status {code}\nSTDERR:\n{err[-2000:]}{warned}"
    assert code == 2, shown
    lines = err.splitlines() + warned
    assert len(lines) == 1 and "Traceback" not in err, shown
    for name in names:
        assert name in lines[0], f"{name!r} not named\n{shown}"
    assert not changes(before, snapshot(tmp_path)), shown


def on_command_line(flag: str, text: str, joined: bool) -> list[str]:
    """`--flag=text`, or `--flag text` (a text that starts with '-' would read as an option there)."""
    return [f"{flag}={text}"] if joined or text.startswith("-") else [flag, text]


@pytest.mark.parametrize("tool, flag", NUMERIC_FLAGS, ids=[f"{t}{f}" for t, f in NUMERIC_FLAGS])
@VALUE_SETTINGS
@given(data=st.data())
def test_a_flag_value_that_breaks_its_bound_is_refused(tool, flag, data, tmp_path, capfd):
    action = action_of(tool, flag)
    kind, bound = kind_of(action), action.type.setting
    specials = st.sampled_from(["nan", "inf", "-inf", "NaN", "Infinity", "1e309", str(10**30)])
    text = data.draw(
        st.one_of(
            padded(out_of_bound_numbers(kind, bound).map(as_text)),
            not_a_number(kind, accepted_words(action)),
            padded(specials),
        )
    )
    argv = BASE_ARGV[tool](tmp_path) + on_command_line(flag, text, data.draw(st.booleans()))
    assert_refused_in_one_line(tool, argv, (flag,), tmp_path, capfd)


@pytest.mark.parametrize("tool, flag", NUMERIC_FLAGS, ids=[f"{t}{f}" for t, f in NUMERIC_FLAGS])
@VALUE_SETTINGS
@given(data=st.data())
def test_a_flag_value_inside_its_bound_is_accepted(tool, flag, data, tmp_path):
    """The parser takes every value the declaration allows, the inclusive ends among them, and gives it unchanged."""
    action = action_of(tool, flag)
    value = data.draw(in_bound_numbers(kind_of(action), action.type.setting))
    args = parser_of(tool).parse_args(
        [*map(str, BASE_ARGV[tool](tmp_path)), *on_command_line(flag, as_text(value), False)]
    )
    assert getattr(args, action.dest) == value


def lacking_devices() -> list[str]:
    """Devices this machine lacks, whatever it has: a GPU index past the count, unknown types, malformed names."""
    lacking = [
        f"cuda:{torch.cuda.device_count()}",
        f"cuda:{torch.cuda.device_count() + 6}",
        "gpu",
        "tpu",
        "cuda:x",
        "cuda:-1",
        "cpu0",
        "",
        "meta",
    ]
    lacking += [] if torch.cuda.is_available() else ["cuda", "cuda:0"]
    return lacking + ([] if torch.backends.mps.is_available() else ["mps"])


@pytest.mark.parametrize("tool, flag", DEVICE_FLAGS, ids=[f"{t}{f}" for t, f in DEVICE_FLAGS])
@pytest.mark.parametrize("device", lacking_devices())
def test_a_device_this_machine_lacks_is_refused(tool, flag, device, tmp_path, capfd):
    argv = BASE_ARGV[tool](tmp_path) + on_command_line(flag, device, device == "")
    assert_refused_in_one_line(tool, argv, (flag,), tmp_path, capfd)


# ---------------------------------------------------------------------------------------------------------------------
# Recipe keys of vaswani-train: on the command line and in a recipe file
# ---------------------------------------------------------------------------------------------------------------------


NUMERIC_KEYS = sorted(n for n, s in SETTINGS.items() if s.type in (int, float))
ALL_KEYS = sorted(SETTINGS)
WRONG_IN_YAML = [1.5, True, "text", [1], {"a": 1}, None]  # each wrong for some types (filtered per key below)


def wrong_yaml_values(name: str) -> st.SearchStrategy:
    """Python values that a recipe file may not give key `name`: of another type, or numbers outside its bound."""
    s = SETTINGS[name]

    def wrong_type(v) -> bool:
        if v is None:
            return not s.nullable
        if v in s.words:
            return False
        if s.choices:
            return v not in s.choices or not isinstance(v, str)
        if s.type is int:
            return isinstance(v, bool) or not isinstance(v, int)
        if s.type is float:
            return isinstance(v, bool) or not isinstance(v, (int, float))
        if s.type is list:
            return not (isinstance(v, list) and all(isinstance(x, str) for x in v))
        return not isinstance(v, s.type)

    options = [st.sampled_from([v for v in WRONG_IN_YAML + [0, "auto-x", ["a", 2]] if wrong_type(v)])]
    if s.type in (int, float):
        options += [out_of_bound_numbers(int, s), st.just(10**400)]
    if s.type is float:
        options += [out_of_bound_numbers(float, s), st.sampled_from([math.nan, math.inf, -math.inf])]
    return st.one_of(options)


def wrong_texts(name: str) -> st.SearchStrategy | None:
    """Command-line texts for `--name` that its declaration refuses (None: every text is a valid value, as for a
    string or a list of strings)."""
    s = SETTINGS[name]
    skip = set(NULLS) | {"None"} if s.nullable else set()
    if s.choices:
        return st.one_of(st.sampled_from(["x", "1", "SAMPLE"]), st.text(max_size=8)).filter(
            lambda t: t not in s.choices and t not in skip
        )
    if s.type in (int, float):
        kind = s.type
        texts = st.one_of(
            padded(out_of_bound_numbers(kind, s).map(as_text)),
            not_a_number(float),
            padded(st.sampled_from(["nan", "inf", "-inf", "1e309", str(10**30)])),
        )
        if kind is int:  # numbers that are no integers
            texts = st.one_of(texts, st.sampled_from(["1.5", "2.0", "1e3", "auto-x", "true"]))
        return texts.filter(lambda t: t.strip().lower() not in skip and t not in s.words)
    if s.type is bool:
        truthy = {"true", "false", "yes", "no", "1", "0", "on", "off", "t", "f", "y", "n"}
        return st.one_of(st.sampled_from(["maybe", "2", "-1", "nan"]), st.text(max_size=6)).filter(
            lambda t: t.strip().lower() not in truthy and t.strip() != "" and t.strip().lower() not in skip
        )
    return None


CLI_KEYS = [n for n in ALL_KEYS if wrong_texts(n) is not None]


def train_argv(a, tmp_path: Path, *extra) -> list:
    return ["--recipe", a.recipe, "--output_dir", tmp_path / "run", "--check", *extra]


@pytest.mark.parametrize("key", CLI_KEYS)
@settings(VALUE_SETTINGS, max_examples=8)
@given(data=st.data())
def test_a_recipe_key_on_the_command_line_that_breaks_its_declaration_is_refused(key, data, assets, tmp_path, capfd):
    text = data.draw(wrong_texts(key))
    argv = train_argv(assets, tmp_path, *on_command_line(f"--{key}", text, data.draw(st.booleans())))
    assert_refused_in_one_line("train", argv, (key,), tmp_path, capfd)


@pytest.mark.parametrize("key", ALL_KEYS)
@settings(VALUE_SETTINGS, max_examples=8)
@given(data=st.data())
def test_a_recipe_key_in_a_file_that_breaks_its_declaration_is_refused(key, data, assets, tmp_path, capfd):
    """The recipe file is named with the key; the file is read, never written."""
    value = data.draw(wrong_yaml_values(key))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({**yaml.safe_load(assets.recipe.read_text()), key: value}), encoding="utf-8")
    argv = ["--recipe", recipe, "--output_dir", tmp_path / "run", "--check"]
    assert_refused_in_one_line("train", argv, (str(recipe), key), tmp_path, capfd)


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@VALUE_SETTINGS
@given(data=st.data())
def test_a_recipe_value_inside_its_bound_is_accepted(key, data, tmp_path):
    """The value check takes every number the declaration allows (ends included), from the command line, from the
    parser of vaswani-train and from a recipe file. (Rules between keys are not the value check: not run here.)"""
    from vaswani_hf.cli.train import RecipeParser

    value = data.draw(in_bound_numbers(SETTINGS[key].type, SETTINGS[key]))
    assert value_from_text(key, as_text(value)) == value
    namespace, remaining = RecipeParser().parse_known_args([f"--{key}={as_text(value)}"])
    assert not remaining and getattr(namespace, key) == value
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({key: value}), encoding="utf-8")
    assert read_recipe_file(recipe) == {key: value}
