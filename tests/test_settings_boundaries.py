"""One form per rule, one check per boundary: a value is checked where it enters (a recipe, a flag, a file) and once
more where it leaves (save), not in between; every rule is a dataclass field with its metadata (`vaswani_hf.settings`),
every flag with a range or choices derives from one, every flag of every tool says what it does and what its default
is; building a config changes nothing outside it (as building a transformers config does not)."""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, TINY, write_corpus

import vaswani_hf.configuration_vaswani as hub_config
import vaswani_hf.validation_vaswani as hub_check
from vaswani_hf import VaswaniConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Calls(list):
    """The names checked, in order, and `places`: (name, where) of each check."""

    def __init__(self):
        super().__init__()
        self.places: list[tuple[str, str]] = []


@pytest.fixture
def checks(monkeypatch):
    """The names the one value check (`validation_vaswani.check_setting`) is called with, in order, wherever it is
    called from (every module that holds it)."""
    calls = _Calls()
    original = hub_check.check_setting

    def counted(name, *args, **kwargs):
        calls.append(name)
        calls.places.append((name, str(args[3] if len(args) > 3 else kwargs.get("where"))))
        return original(name, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "check_setting", None) is original:
            monkeypatch.setattr(module, "check_setting", counted)
    return calls


def test_a_recipe_value_is_checked_once_where_it_enters_and_once_where_it_leaves(tmp_path, checks):
    """`--num_heads 4` on vaswani-train's command line, as a run takes it: the parser reads it, the recipe checks it
    (building its config), the plan carries that config, the run builds the model from it -- one check -- and saving
    the model (a checkpoint, the Hub folder) checks it once more. The recipe file's own value, which the flag
    replaces, is checked once where the file is merged."""
    from vaswani_hf.cli.train import parse_command_line
    from vaswani_hf.tokenization import train_bpe_tokenizer
    from vaswani_hf.training.plan import plan_run
    from vaswani_hf.training.trainer import build_model

    corpus = write_corpus(tmp_path / "corpus")
    argv = ["--recipe", "default", "--data_dir", str(corpus), "--output_dir", str(tmp_path / "run")]
    for key in ("data_format", "vocab_size", "d_model", "d_ff", "num_encoder_layers", "num_decoder_layers"):
        argv += [f"--{key}", str(TINY[key])]
    recipe, _ = parse_command_line([*argv, "--num_heads", "4"])
    plan = plan_run(recipe)
    tokenizer = train_bpe_tokenizer([corpus / "train.en", corpus / "train.de"], vocab_size=300, show_progress=False)
    model = build_model(plan, tokenizer)
    # The default recipe's own num_heads, which the flag replaces, is checked once too, naming the file (a bad value
    # there is refused even under a flag); the flag's value is checked once, where the recipe is built.
    from_file = [where for name, where in checks.places if name == "num_heads" and where.endswith("default.yaml")]
    assert model.config.num_heads == 4 and len(from_file) == 1 and checks.count("num_heads") == 2, checks.places
    model.save_pretrained(tmp_path / "saved")
    assert checks.count("num_heads") == 3, checks


def test_a_config_json_value_is_checked_once_when_the_model_is_loaded(tmp_path, checks):
    from transformers import AutoModelForSeq2SeqLM

    from vaswani_hf import VaswaniForConditionalGeneration

    VaswaniForConditionalGeneration(
        VaswaniConfig(**{k: TINY[k] for k in ("d_model", "d_ff")}, vocab_size=64)
    ).save_pretrained(tmp_path / "model")
    checks.clear()
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model")
    assert model.config.d_model == TINY["d_model"] and checks.count("d_model") == 1, checks


def test_building_a_config_leaves_the_pipeline_registry_as_transformers_has_it(monkeypatch):
    """The pipeline's task names are registered where vaswani_hf is imported or a pipeline is asked for, never when a
    config is built: a process whose registry is transformers' own keeps it so, whatever configs it builds."""
    from transformers import pipelines

    registry = pipelines.PIPELINE_REGISTRY
    monkeypatch.setattr(registry, "supported_tasks", {k: v for k, v in registry.supported_tasks.items()})
    monkeypatch.setattr(registry, "task_aliases", dict(registry.task_aliases))
    removed = dict(getattr(pipelines, "REMOVED_TASKS", {}))
    monkeypatch.setattr(pipelines, "REMOVED_TASKS", dict(removed), raising=False)
    before = (dict(registry.supported_tasks), dict(registry.task_aliases), type(registry.task_aliases))
    for config in (
        VaswaniConfig(),
        VaswaniConfig(langs=["fr", "en"]),
        VaswaniConfig.from_dict(VaswaniConfig().to_dict()),
    ):
        assert config.custom_pipelines
    assert (dict(registry.supported_tasks), dict(registry.task_aliases), type(registry.task_aliases)) == before
    assert pipelines.REMOVED_TASKS == removed


def test_every_declared_default_is_a_value_its_declaration_allows():
    from vaswani_hf.settings import GENERATION_SETTINGS, MODEL_SETTINGS
    from vaswani_hf.training.recipe import SETTINGS

    for table in (MODEL_SETTINGS, GENERATION_SETTINGS, SETTINGS, *_tool_settings()):
        for name, setting in table.items():
            assert setting.problem(setting.default) is None, (name, setting.default, setting.describe())


def _tool_settings() -> list[dict]:
    from vaswani_hf.cli import average_checkpoints, evaluate, translate, visualize_attention
    from vaswani_hf.export.ctranslate2_spec import EXPORT_SETTINGS
    from vaswani_hf.tokenization import BPE_SETTINGS

    return [m.OPTIONS for m in (average_checkpoints, evaluate, translate, visualize_attention)] + [
        EXPORT_SETTINGS,
        BPE_SETTINGS,
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Every tool's flags, from the registry
# ---------------------------------------------------------------------------------------------------------------------


def _parsers():
    from vaswani_hf.cli.registry import COMMANDS

    return [(name, command.build_parser()) for name, command in COMMANDS.items()]


def _required_groups(parser: argparse.ArgumentParser) -> set[int]:
    return {id(a) for group in parser._mutually_exclusive_groups if group.required for a in group._group_actions}


@pytest.mark.parametrize("tool, parser", _parsers(), ids=[name for name, _ in _parsers()])
def test_every_flag_of_every_tool_has_help_and_states_its_default(tool, parser):
    """`--help` says what each flag does, and for a flag that takes a value and may be left out, its default: the
    value argparse fills in (shown by the shared formatter), or in words what leaving it out means."""
    formatter = parser._get_formatter()
    required = _required_groups(parser)
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        shown = formatter._expand_help(action) if action.help else ""
        takes_value = action.nargs != 0 and action.option_strings
        if not shown.strip():
            missing.append(f"{action.option_strings or action.dest}: no help")
        elif takes_value and not action.required and id(action) not in required and "default" not in shown:
            missing.append(f"{action.option_strings}: no default in {shown!r}")
    assert not missing, "\n".join(missing)
    assert "(default: " in parser.format_help()


def _add_argument_calls():
    for path in sorted((REPO / "vaswani_hf").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                yield path.relative_to(REPO), node


def test_no_flag_writes_its_choices_or_its_range_by_hand():
    """A flag with choices or a range derives them from a declaration (`constraints.flag`): no `choices=` and no
    argparse type built in place in an `add_argument` call of the package."""
    by_hand = [
        f"{path}:{node.lineno}"
        for path, node in _add_argument_calls()
        for keyword in node.keywords
        if keyword.arg == "choices" or (keyword.arg == "type" and isinstance(keyword.value, ast.Call))
    ]
    assert not by_hand, by_hand


def test_a_setting_is_written_one_way():
    """Every `Setting` comes from a dataclass field (`settings_of`) or is a narrower view of one (`narrowed`): nothing
    in the package builds one in place."""
    in_place = []
    for path in sorted((REPO / "vaswani_hf").rglob("*.py")):
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Setting":
                in_place.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not in_place, in_place


def test_the_model_file_holds_the_config_and_its_one_check_only(tmp_path):
    """configuration_vaswani.py, copied next to the weights, declares the fields and one check; the declaration
    machinery (describe, parse, narrow, flags, recipe keys) is the package's."""
    source = Path(hub_config.__file__).read_text(encoding="utf-8")
    assert (
        "class Setting:" not in source
        and "class Setting(" not in source
        and "def parse" not in source
        and "def narrowed" not in source
    )
    saved = tmp_path / "model"
    VaswaniConfig().save_pretrained(saved)
    assert json.loads((saved / "config.json").read_text())["num_heads"] == 8
