"""Every private name of transformers (or accelerate) the package relies on, in one place: which file uses it, how
(overrides, reads, sets, calls, passes as a keyword, patches), why no public mechanism of transformers 5.24 does the
job, and the tests that pin it. tests/test_transformers_hooks.py reads the package's code and fails when it uses a
private name of these libraries that is not listed here, and runs the pins.

A hook transformers renames, re-signs or stops calling fails loudly in its pin instead of silently dropping what it
does (the paper's length penalty, atomic checkpoints, ...). Replaced by public mechanisms, and so not here any more:
`_beam_search` / `_sample` (overridden) by `generate(custom_generate=paper_decoding)`; `_eos_token_tensor` /
`_pad_token_tensor` (read) by the generation config's `eos_token_id` / `pad_token_id`; the pipeline's
`_generate_kwargs` (read) by its constructor's own arguments; `_commit_hash` (passed to cached_file) is gone: transformers
5.24 resolves the revision itself and ignores it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIBRARIES = ("transformers", "accelerate")
HOOK_TESTS = "tests/test_transformers_hooks.py::"
TRAINER_TEST = "tests/test_training_trainer.py::test_the_private_trainer_hooks_overridden_are_still_transformers_own"


@dataclass(frozen=True)
class Hook:
    where: tuple[str, ...]  # the package's files that use it (under vaswani_hf/)
    owner: str  # the transformers object that defines or reads it: "module:qualified.name" or "module"
    use: str  # overridden, read, set, called, keyword, patched
    why: str  # why no public mechanism does it
    pinned_by: tuple[str, ...] = ()  # tests beyond test_each_hook_is_still_where_transformers_keeps_it


GENERATE = "transformers.generation.utils:GenerationMixin"
MODEL = "transformers.modeling_utils:PreTrainedModel"
PIPELINE = "transformers.pipelines.base:Pipeline"
TRAINER = "transformers.trainer:Trainer"
MODEL_AUTHOR = (
    "part of the interface transformers gives a model's author (every model of transformers declares it, Marian too): "
    "private by name, public by contract"
)
PIPELINE_FLAG = "a flag Pipeline says downstream pipelines override (pipelines/base.py), read by pipeline()"
GNMT = (
    "transformers' beam search scores with |Y| ** alpha and takes no other length penalty; the paper's GNMT "
    "((5 + |Y|) / 6) ** alpha (Section 6.1) replaces it here, in transformers' own loop (where the lean loops do not run)"
)
SCORING_PINS = (
    HOOK_TESTS + "test_each_generation_hook_still_exists_with_the_parameters_we_use",
    HOOK_TESTS + "test_beam_search_still_calls_the_scoring_hooks_with_keywords",
    HOOK_TESTS + "test_transformers_beam_loop_reaches_every_override",
)
CACHED_FILE = (
    "generation_config.json found where from_pretrained found the weights (a folder, or the Hub cache at the same "
    "commit) without failing where there is none, as GenerationConfig.from_pretrained finds it: cached_file's "
    "switches for that are private keywords"
)
CHECKPOINTS = (
    "atomic checkpoints: transformers writes straight into checkpoint-N (a crash leaves a partial folder that resume "
    "would take) and has no hook between writing and publishing: the save goes to a staging folder, then is renamed"
)
EVALUATION = (
    "evaluation_loop is replaced (its all_gather of unequal token batches hung NCCL, and it weighted every batch's "
    "loss by the first's size): the model is prepared for evaluation as transformers' evaluation_loop prepares it"
)

HOOKS = {
    "_update_finished_beams": Hook(("generation_vaswani.py",), GENERATE, "overridden", GNMT, SCORING_PINS),
    "_check_early_stop_heuristic": Hook(("generation_vaswani.py",), GENERATE, "overridden", GNMT, SCORING_PINS),
    "_get_top_k_continuations": Hook(
        ("generation_vaswani.py",),
        GENERATE,
        "overridden",
        "speed only: transformers' loop takes its top 2k with torch.topk over beams x vocabulary; fast_topk computes "
        "the same several times faster on CPU, and no setting chooses the routine",
        SCORING_PINS,
    ),
    "_gather_beams": Hook(
        ("generation_vaswani.py",),
        GENERATE,
        "called",
        "by our `_get_top_k_continuations`, exactly as transformers' own top-k step gathers",
        (HOOK_TESTS + "test_each_generation_hook_still_exists_with_the_parameters_we_use",),
    ),
    "_reorder_cache": Hook(
        ("generation_vaswani.py",),
        GENERATE,
        "overridden",
        "speed only: a model hook transformers' beam loop calls where the model has it; transformers' default "
        "reorders the cross-attention K/V too, the same for every beam, and the cache classes take no option",
        (HOOK_TESTS + "test_beam_search_still_reorders_the_cache_through_the_model",),
    ),
    "_get_default_generation_params": Hook(
        ("generation_vaswani.py",),
        "transformers.generation.configuration_utils:GenerationConfig",
        "called",
        "the values generate() gives the settings a call leaves unset (its _prepare_generation_config reads them "
        "here): a setting at that value asks for nothing, so lean_loop_refusal lets the lean loops run, and the mode "
        "generate() will find is read from the settings with them; GenerationConfig() itself leaves them None",
        (
            "tests/test_generation_options.py::"
            "test_generate_still_fills_unset_settings_with_the_values_lean_loop_refusal_compares_with",
            "tests/test_generation_options.py::test_the_paper_decoding_and_greedy_decoding_still_run_the_lean_loops",
        ),
    ),
    "GENERATION_MODES_MAPPING": Hook(
        ("generation_vaswani.py",),
        "transformers.generation.utils",
        "read",
        "paper_decoding (the public custom_generate) falls back to transformers' own loop for the mode by its name "
        "here, as generate() finds it; the loops themselves (_beam_search, _sample) are private methods",
        (HOOK_TESTS + "test_generate_still_dispatches_to_beam_search_and_sample_by_name",),
    ),
    "_attn_implementation": Hook(
        ("generation_vaswani.py", "modeling_vaswani.py", "visualize/attention.py"),
        "transformers.configuration_utils:PreTrainedConfig",
        "read",
        "the attention implementation a model runs: transformers' own models read it so to pick the attention "
        "function; there is a public setter (set_attn_implementation) and no public getter",
    ),
    "_raise_exceptions_for_missing_entries": Hook(
        ("generation_config_vaswani.py",), "transformers.utils.hub:cached_files", "keyword", CACHED_FILE
    ),
    "_raise_exceptions_for_connection_errors": Hook(
        ("generation_config_vaswani.py",), "transformers.utils.hub:cached_files", "keyword", CACHED_FILE
    ),
    "_init_weights": Hook(("modeling_vaswani.py",), MODEL, "overridden", MODEL_AUTHOR),
    "_tied_weights_keys": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_keys_to_ignore_on_load_unexpected": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_no_split_modules": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_supports_sdpa": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_supports_flash_attn": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_supports_flex_attn": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_can_compile_fullgraph": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_can_record_outputs": Hook(("modeling_vaswani.py",), MODEL, "set", MODEL_AUTHOR),
    "_apply": Hook(
        ("modeling_vaswani.py",),
        "torch.nn:Module",
        "overridden",
        "torch's, not transformers': every move of a module (to, to_empty, cuda) runs through it; accelerate's "
        "init_empty_weights leaves tied embeddings apart, and the model ties them again before a move",
        (
            "tests/test_ecosystem_materialise.py::test_init_empty_weights_and_load_checkpoint_and_dispatch_need_no_manual_tie",
        ),
    ),
    "_is_hf_initialized": Hook(
        ("modeling_vaswani.py",),
        "transformers.initialization",
        "read",
        "the <pad> row (the decoder's zero start vector) is zeroed by indexing, outside the init helpers that skip "
        "weights from_pretrained loaded; this is the mark they check",
    ),
    "_sanitize_parameters": Hook(
        ("pipeline_vaswani.py",),
        PIPELINE,
        "overridden",
        "one of the four methods a pipeline implements (transformers' guide to adding a pipeline)",
        (HOOK_TESTS + "test_pipeline_still_calls_the_methods_we_override",),
    ),
    "_forward": Hook(
        ("pipeline_vaswani.py",),
        PIPELINE,
        "overridden",
        "one of the four methods a pipeline implements (transformers' guide to adding a pipeline)",
        (HOOK_TESTS + "test_pipeline_still_calls_the_methods_we_override",),
    ),
    **{
        flag: Hook(
            ("pipeline_vaswani.py",),
            PIPELINE,
            "set",
            PIPELINE_FLAG,
            (HOOK_TESTS + "test_each_pipeline_flag_still_exists_and_is_read",),
        )
        for flag in (
            "_pipeline_calls_generate",
            "_load_tokenizer",
            "_load_processor",
            "_load_image_processor",
            "_load_feature_extractor",
            "_load_video_processor",
        )
    },
    "_prepare_generate_kwargs": Hook(
        ("pipeline_vaswani.py",),
        PIPELINE,
        "called",
        "a call's generate() arguments over the constructor's, merged as transformers' own generation pipelines do",
        (HOOK_TESTS + "test_pipeline_init_still_sets_aside_generate_arguments",),
    ),
    "_registered_impl": Hook(
        ("pipeline_vaswani.py",),
        PIPELINE,
        "set",
        "Pipeline.save_pretrained writes config.json's custom_pipelines from it; register_pipeline records every "
        "task name registered, and config.json names the one task",
        (HOOK_TESTS + "test_pipeline_registry_still_works_as_register_pipeline_tasks_patches_it",),
    ),
    "REMOVED_TASKS": Hook(
        ("pipeline_vaswani.py",),
        "transformers.pipelines",
        "patched",
        "transformers 5 refuses the translation task names before its registry: they are taken out for this model "
        "(other models still get transformers' refusal)",
        (HOOK_TESTS + "test_pipeline_registry_still_works_as_register_pipeline_tasks_patches_it",),
    ),
    "task_aliases": Hook(
        ("pipeline_vaswani.py",),
        "transformers.pipelines.base:PipelineRegistry",
        "patched",
        "every translation_{src}_to_{tgt} name is an alias of translation, which no registration can say",
        (HOOK_TESTS + "test_pipeline_registry_still_works_as_register_pipeline_tasks_patches_it",),
    ),
    "_from_pipeline": Hook(
        ("configuration_vaswani.py",),
        "transformers.pipelines:pipeline",
        "read",
        "the one sign that transformers.pipeline (not a user or save_pretrained) loads the config, before it resolves "
        "the task name: the config then registers the pipeline's task names, and loading it for anything else leaves "
        "transformers as it is",
        (HOOK_TESTS + "test_pipeline_still_loads_the_config_with_from_pipeline_before_it_resolves_the_task",),
    ),
    "_get_grad_norm": Hook(
        ("training/trainer.py",),
        TRAINER,
        "overridden",
        "speed only: without clipping (the paper's max_grad_norm 0) transformers still computes the gradient norm to "
        "log it, a pass over every gradient (1-2% of a Multi30k CPU step), and no argument turns that off",
        (TRAINER_TEST,),
    ),
    "_save_checkpoint": Hook(("training/trainer.py",), TRAINER, "overridden", CHECKPOINTS, (TRAINER_TEST,)),
    "_get_output_dir": Hook(("training/trainer.py",), TRAINER, "overridden", CHECKPOINTS, (TRAINER_TEST,)),
    "_issue_warnings_after_load": Hook(
        ("training/trainer.py",),
        TRAINER,
        "overridden",
        "safetensors stores tied tensors once (Section 3.4), so every resume would report the tied keys missing; "
        "transformers re-ties only the keys of _keys_to_ignore_on_save, which would drop them from untied saves too",
        (TRAINER_TEST,),
    ),
    "_remove_unused_columns": Hook(
        ("training/trainer.py",),
        TRAINER,
        "called",
        "the token-budget DataLoader is built here (transformers batches by sentence count), with transformers' own "
        "column filter",
        (TRAINER_TEST,),
    ),
    "_created_lr_scheduler": Hook(
        ("training/trainer.py",),
        TRAINER,
        "set",
        "create_scheduler (public) builds the paper's schedule; transformers rebuilds a scheduler it created for a "
        "second train() only where this mark says so",
        (TRAINER_TEST,),
    ),
    "_gen_kwargs": Hook(
        ("training/trainer.py",),
        "transformers.trainer_seq2seq:Seq2SeqTrainer",
        "read",
        "Seq2SeqTrainer keeps evaluate()'s and predict()'s generate() arguments there, merged with the arguments' "
        "generation_max_length and generation_num_beams; its own prediction_step reads them so",
        (TRAINER_TEST,),
    ),
    "_wrap_model": Hook(("training/trainer.py",), TRAINER, "called", EVALUATION, (TRAINER_TEST,)),
    "_models": Hook(("training/trainer.py",), "accelerate.accelerator:Accelerator", "read", EVALUATION),
    "_prepare_inputs": Hook(
        ("training/trainer.py",),
        TRAINER,
        "called",
        "the batch moved to the device as Trainer.prediction_step moves it (prediction_step is replaced to add the "
        "evaluation's loss sums)",
        (TRAINER_TEST,),
    ),
    "_parse_dataclass_field": Hook(
        ("cli/train.py",),
        "transformers.hf_argparser:HfArgumentParser",
        "overridden",
        "HfArgumentParser passes a field's metadata to argparse as keywords; the recipe's declaration of each key "
        "(a Setting) lives there too and is taken out first",
    ),
    "_add_dataclass_arguments": Hook(
        ("cli/train.py",),
        "transformers.hf_argparser:HfArgumentParser",
        "overridden",
        "the recipe's model section is VaswaniConfig itself, of which only the settings declared with recipe: True "
        "are flags; HfArgumentParser would add every field of the dataclass, so for it the parser adds those alone "
        "(each through HfArgumentParser's own _parse_dataclass_field), and every other section as HfArgumentParser does",
    ),
    "_argument_group_name": Hook(
        ("cli/train.py", "training/recipe.py"),
        "transformers.hf_argparser",
        "set",
        "HfArgumentParser's documented way to give a dataclass's flags a group in --help (its docstring)",
    ),
}


def owner_of(hook: Hook):
    module, _, qualified = hook.owner.partition(":")
    obj = importlib.import_module(module)
    for part in filter(None, qualified.split(".")):
        obj = getattr(obj, part)
    return obj


# --- which private names of the libraries the package's code uses -----------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _library_names() -> frozenset[str]:
    """Every `_name` in the source files that define what the package imports from the libraries (and the bases of
    the classes it imports)."""
    files = set()
    for path in (REPO / "vaswani_hf").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in LIBRARIES:
                module = importlib.import_module(node.module)
                found = [module, *(getattr(module, a.name) for a in node.names if hasattr(module, a.name))]
                for obj in found:
                    for part in obj.__mro__ if inspect.isclass(obj) else (obj,):
                        source = inspect.getmodule(part)
                        if source is not None and source.__name__.split(".")[0] in LIBRARIES:
                            files.add(inspect.getsourcefile(source))
    return frozenset(name for file in files for name in re.findall(r"\b_[a-z]\w*", Path(file).read_text()))


def _library_bases(path: Path, node: ast.ClassDef) -> list[type]:
    cls = getattr(importlib.import_module(_module_name(path)), node.name, None)
    return [b for b in getattr(cls, "__mro__", ())[1:] if b.__module__.split(".")[0] in LIBRARIES]


def _class_names(node: ast.ClassDef) -> list[str]:
    """The names a class body defines: methods and assigned attributes."""
    names = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(item.name)
        targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def private_library_names_used() -> dict[str, set[str]]:
    """{private name of the libraries: the package's files (under vaswani_hf/) that use it}: a name a class of ours
    defines over a library class's, or that the code reads, sets, calls, imports, passes as a keyword or names in a
    string of getattr()-like calls and literal tuples, where the libraries' sources have it and the package itself
    defines it nowhere but in a subclass of theirs."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in (REPO / "vaswani_hf").rglob("*.py")}
    subclasses = {
        id(n): _library_bases(p, n) for p, t in trees.items() for n in ast.walk(t) if isinstance(n, ast.ClassDef)
    }
    own = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not subclasses[id(node)]:
                own |= set(_class_names(node))
                # and the attributes such a class sets on its instances (self._items = ... in __init__)
                own |= {
                    n.attr
                    for n in ast.walk(node)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                }
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.col_offset == 0:
                own.add(node.name)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
    library, found = _library_names(), {}
    for path, tree in trees.items():
        where = str(path.relative_to(REPO / "vaswani_hf"))
        strings = {  # string constants of getattr()-like calls and of literal tuples, lists and sets
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Tuple, ast.List, ast.Set))
            or isinstance(node, ast.Call)
            and getattr(node.func, "id", "") in ("getattr", "hasattr", "setattr")
            for arg in (node.elts if hasattr(node, "elts") else node.args)
        }
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ClassDef) and subclasses[id(node)]:
                names = [n for n in _class_names(node) if any(n in vars(b) for b in subclasses[id(node)])]
                names += [n for n in _class_names(node) if n in library and n not in own]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.keyword) and node.arg:
                names = [node.arg]
            elif isinstance(node, ast.ImportFrom):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) in strings:
                names = [node.value]
            for name in names:
                if re.fullmatch(r"_[a-z]\w*", name) and name in library and not name.startswith("_abc"):
                    if name not in own or isinstance(node, ast.ClassDef):
                        found.setdefault(name, set()).add(where)
    return found
