"""Write the Hub-ready model folder, which holds everything a repository needs where this package is not installed.

With it the model loads, translates and is described. The folder is written in one place and appears whole.

`save_hub_folder` writes the weights (safetensors), config.json with `auto_map` and `custom_pipelines`, the code files
(transformers' `save_pretrained` copies the registered classes' files and their relative imports, the pipeline's
included), the tokenizer, the paper's `generation_config.json`, the Inference Endpoints handler (`add_handler`), the
caller's extra files and the model card. `missing_code_files` checks that a folder carries every code file its
config.json needs under `trust_remote_code`. transformers copies them, but a folder assembled by hand (with files
copied from an older run) may lack one, and the upload refuses such a folder rather than fail on the Hub.
"""

from __future__ import annotations

import logging
import os
import shutil
import symtable
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..configuration_vaswani import pipeline_settings
from ..generation_vaswani import default_generation_config
from ..io import atomic_output_dir, check_output_dir, check_same_vocabulary, read_json
from ..io.models import code_references, referenced_code_files, relative_imports
from ..pipeline_vaswani import register_pipeline_tasks
from ..tokenization import declare_plain_tokenizer
from .card import PACKAGE_DIR, write_model_card

logger = logging.getLogger(__name__)

HANDLER_TEMPLATE = PACKAGE_DIR / "templates" / "handler.py"
HANDLER_REQUIREMENTS = "transformers>=5.0,<6\nsafetensors>=0.4\n"
# The kind of folder save_hub_folder writes, as its marker names it (vaswani_hf.io.outputs).
HUB_FOLDER = "Hub model folder"


def add_handler(folder: str | os.PathLike) -> Path:
    """Copy the Inference Endpoints custom handler (`EndpointHandler`) into `folder` as `handler.py`, and write a
    `requirements.txt` naming transformers 5 unless the folder has one, because the endpoint image may ship an older
    transformers. Returns the handler's path."""
    folder = Path(folder)
    target = folder / "handler.py"
    shutil.copyfile(HANDLER_TEMPLATE, target)
    requirements = folder / "requirements.txt"
    if not requirements.exists():
        requirements.write_text(HANDLER_REQUIREMENTS, encoding="utf-8")
    return target


def missing_code_files(folder: str | os.PathLike, names: set[str] | None = None) -> list[str]:
    """Return the problems that would stop `trust_remote_code` from loading `folder`, or an empty list if none.

    A problem is one of three things: a code file that config.json references (`auto_map`, `custom_pipelines`) is
    absent; a code file imports a sibling (`from .x import`) that is absent, as modeling_vaswani.py imports
    generation_vaswani.py; or a code file is present but does not define the class config.json names in it. `names`
    are the files that will be in the folder; by default they are the folder's files now."""
    folder = Path(folder)
    names = names if names is not None else {p.name for p in folder.iterdir() if p.is_file()}
    problems = []
    config = read_json(folder / "config.json", what="config.json") if "config.json" in names else {}
    config = config if isinstance(config, Mapping) else {}
    for name in referenced_code_files(config):
        if name not in names:
            problems.append(f"code file {name} referenced by config.json is missing")
    for name in sorted(n for n in names if n.endswith(".py")):
        for module in relative_imports(folder / name):
            if module not in names:
                problems.append(f"{name} imports .{module[:-3]}, but {module} is not in the folder")
    return problems + _undefined_references(folder, names, config)


def _top_level_names(source: str) -> set[str] | None:
    """Return the names a module defines at top level (classes, functions, assignments, imports), or None.

    None means the module does not parse, and the upload's check then names that file.
    """
    try:
        table = symtable.symtable(source, "<code file>", "exec")
    except (SyntaxError, ValueError):
        return None
    return {symbol.get_name() for symbol in table.get_symbols() if symbol.is_assigned() or symbol.is_imported()}


def _undefined_references(folder: Path, names: set[str], config: Mapping) -> list[str]:
    """Return each "module.Class" that config.json names whose module is present but does not define Class.

    Such a reference is caught here because trust_remote_code would otherwise fail on the user's machine.
    """
    problems = []
    for module, attribute in sorted(code_references(config)):
        if not attribute or f"{module}.py" not in names:
            continue  # A missing module is reported as missing by missing_code_files.
        defined = _top_level_names((folder / f"{module}.py").read_text(encoding="utf-8", errors="replace"))
        if defined is not None and attribute not in defined:
            problems.append(
                f"{folder / (module + '.py')} does not define {attribute}, which config.json names; "
                "copy the code files again (save_hub_folder)"
            )
    return problems


def _minimal_model_card(scores: Mapping | None, training_info: Mapping | None, folder: Path) -> str:
    """Return a plain README.md for when the real card cannot be rendered.

    That happens, for example, when the run has no languages or a score is not a number; the trained model must not
    be lost over its description.
    """
    info = dict(training_info or {})
    lines = [
        "---",
        "library_name: transformers",
        "tags: [translation, transformer, vaswani2017]",
        f"language: [{info.get('source_lang', 'en')}, {info.get('target_lang', 'de')}]",
        "---",
        "",
        f"# Transformer ({info.get('model_name', 'vaswani_hf')})",
        "",
        'The original Transformer (Vaswani et al., 2017, "Attention Is All You Need") trained with `vaswani_hf`.',
        "Load with `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)`.",
        "",
        "## Metrics",
        "",
    ]
    for name, value in sorted((scores or {}).items()):
        value = value.get("score") if isinstance(value, Mapping) else value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines.append(f"- {name}: {value:.4g}" if isinstance(value, float) else f"- {name}: {value}")
    files = sorted(p.name for p in folder.iterdir() if p.suffix == ".png" or p.name == "training_metrics.json")
    if files:
        lines += ["", "Also in this folder: " + ", ".join(f"`{name}`" for name in files) + "."]
    return "\n".join(lines + [""])


def _write_card(folder: Path, scores: Mapping | None, training_info: Mapping | None) -> None:
    try:
        write_model_card(folder, scores, training_info or {})
        if (folder / "README.md").is_file():
            return
    except Exception as error:  # noqa: BLE001 - no problem of any kind with the card may lose the trained model.
        logger.warning(
            "the model card could not be rendered (%s: %s); writing a minimal README.md", type(error).__name__, error
        )
    (folder / "README.md").write_text(_minimal_model_card(scores, training_info, folder), encoding="utf-8")


def save_hub_folder(
    model,
    tokenizer,
    out_dir: str | os.PathLike,
    *,
    scores: Mapping | None = None,
    training_info: Mapping | None = None,
    extra_files: Mapping[str, str | bytes] | None = None,
    write_extra: Callable[[Path], Any] | None = None,
    overwrite: bool = False,
    own: bool = False,
) -> Path:
    """Write a Hub-ready model folder at `out_dir` and return it.

    The folder holds the model (weights, config with `auto_map` and `custom_pipelines`, code files) with the paper's
    decoding settings as its generation config (Section 6.1, not the defaults Seq2SeqTrainer leaves there), the
    tokenizer, the endpoint handler and requirements.txt (`add_handler`), `extra_files` (a mapping from file name to
    text or bytes), whatever `write_extra(folder)` writes (plots, for example), and the model card of
    `write_model_card(folder, scores, training_info)`; if the card cannot be rendered, a minimal README.md is written
    with a warning. `model` may be a `Trainer`, whose unwrapped model is saved. With `source_lang` and `target_lang` in
    `training_info`, the model's config records the pair (`langs`), so that `pipeline("translation_en_to_de",
    model=folder, trust_remote_code=True)` works too and the pipeline checks `src_lang` and `tgt_lang` against it.
    config.json names the one pipeline task "translation", which `pipeline(model=folder, trust_remote_code=True)`
    infers.

    `out_dir` is checked first. It raises a UsageError if it is a file, or a non-empty folder without `overwrite`, or,
    with `overwrite`, a folder that is not an earlier Hub folder of this package (`HUB_FOLDER`, or with `own` the
    caller's own earlier export, which it vouches for). A tokenizer of another vocabulary than the model's is a
    UsageError too. The folder is written beside `out_dir` and renamed into place, so it appears whole or not at
    all."""
    out_dir = check_output_dir(out_dir, overwrite=overwrite, what="Hub folder", kind=None if own else HUB_FOLDER)
    for name in extra_files or {}:
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"extra_files: {name!r} is not a plain file name")
    if (
        hasattr(model, "model") and hasattr(model, "args") and hasattr(model, "accelerator")
    ):  # A Trainer is unwrapped to its model.
        model = model.accelerator.unwrap_model(model.model)
    if tokenizer is not None:
        check_same_vocabulary(model, tokenizer)
    if getattr(model.config, "model_type", None) == "vaswani":
        model.generation_config = default_generation_config(model.config)
        info = training_info or {}
        if info.get("source_lang") and info.get("target_lang"):
            model.config.langs = [info["source_lang"], info["target_lang"]]
        # The Trainer writes its args.use_cache (False) into the config of the model it trains; the published model
        # should decode with its key/value cache, so it is set back.
        model.config.use_cache = True
        model.config.custom_pipelines, model.config.langs = pipeline_settings(
            model.config.custom_pipelines, model.config.langs
        )
        register_pipeline_tasks(model.config.langs)
    with atomic_output_dir(out_dir, kind=HUB_FOLDER, overwrite=overwrite or own) as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
            declare_plain_tokenizer(tmp)
        add_handler(tmp)
        for name, content in (extra_files or {}).items():
            if isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(content, encoding="utf-8")
        if write_extra is not None:
            write_extra(tmp)
        _write_card(tmp, scores, training_info)
    return out_dir
