"""Check model folders cheaply before anything is loaded, then load them strictly.

A model folder is what `save_pretrained` writes: config.json, the safetensors weights (one file, or shards and their
index) and the tokenizer. It is a model folder however it is stored: its files may be symbolic links (a snapshot of
huggingface_hub's cache, models--org--name/snapshots/<commit>/, links every file into ../../blobs/; a user may link a
folder's files into another folder) and it may be read-only. Every tool reads a file through its link, as
`from_pretrained` does, and copies or uploads what the link points at; only what a declared name resolves to must be a
regular file. The guard against symbolic links belongs to outputs (`vaswani_hf.io.outputs`): nothing is written into or
through a link. A missing, truncated or broken file is named in one line before anything is loaded
(`check_model_folder`): config.json is this model's (model_type "vaswani") or that of a transformers translation model,
the tokenizer files and generation_config.json have their declared shapes and settings, and every weight tensor is
floating point. Loading (`load_model_folder`) is strict: every tensor the config's model needs is in the weights, every
tensor of the weights is used, and their shapes agree. transformers itself only logs a report and initialises missing
layers at random, which would translate with a dropped or random layer. After loading, every weight is finite (a NaN
from a diverged run would translate to empty lines), and the tokenizer has exactly the model's vocabulary and special
tokens.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

from ..configuration_vaswani import SettingError
from ..errors import UsageError, one_line
from ..generation_vaswani import check_generation_settings
from .binary_files import check_safetensors
from .files import (
    CONFIG,
    GENERATION_CONFIG,
    SPECIAL_TOKENS_MAP,
    TOKENIZER_CONFIG,
    WEIGHTS_INDEX_SHAPE,
    check_library_input,
    check_tokenizer_file,
    read_json,
)
from .outputs import path_kind

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
logger = logging.getLogger(__name__)

# The files a model folder may hold are declared here, once. MODEL_FILES are the model's own files (`code_files` finds
# the code files its config.json needs), and HUB_FILES are those a Hub folder adds (the card, the handler and the run's
# report). Any other file of an input folder is named in a warning and left out.
MODEL_FILES = (
    WEIGHTS,
    "model-*-of-*.safetensors",
    WEIGHTS_INDEX,
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "*.spm",
)
# These are the package's code files that are copied next to the weights. They import only torch, transformers and
# each other, because they run under trust_remote_code. config.json names the configuration's and the model's files;
# the others come along through their relative imports.
CODE_FILES = (
    "configuration_vaswani.py",
    "modeling_vaswani.py",
    "generation_vaswani.py",
    "generation_config_vaswani.py",
    "validation_vaswani.py",
    "beam_search_vaswani.py",
    "pipeline_vaswani.py",
)
HUB_FILES = (
    "README.md",
    "handler.py",
    "requirements.txt",
    "metrics.json",
    "training_metrics.json",
    "recipe.yaml",
    "*.png",
    "all_results.json",
    "eval_results.json",
    "train_results.json",
    "test_results.json",
    "scores.json",
)
_RELATIVE_IMPORT = re.compile(r"^\s*from\s+\.([A-Za-z_][A-Za-z0-9_]*)\s+import\s", re.MULTILINE)


def code_references(config: Mapping) -> set[tuple[str, str]]:
    """Return the (module, class) pairs of the code that a config.json's `auto_map` and `custom_pipelines` name. A
    "repo--" prefix is dropped, and the class is "" where a reference names only a module."""
    auto_map = config.get("auto_map") or {}
    references = [ref for value in auto_map.values() for ref in (value if isinstance(value, list) else [value])]
    references += [p.get("impl") for p in (config.get("custom_pipelines") or {}).values() if isinstance(p, Mapping)]
    return {tuple((ref.split("--")[-1].rsplit(".", 1) + [""])[:2]) for ref in references if isinstance(ref, str)}


def referenced_code_files(config: Mapping) -> list[str]:
    """Return the sorted names of the code files that a config.json names: the modules (`code_references`) of its
    `auto_map` entries ("module.Class" or "repo--module.Class") and of its `custom_pipelines` implementations."""
    return sorted({f"{module}.py" for module, _ in code_references(config)})


def relative_imports(path: Path) -> list[str]:
    """Return the sibling files that a code file imports with `from .x import`; transformers copies and loads them
    along with it."""
    return [f"{module}.py" for module in _RELATIVE_IMPORT.findall(path.read_text(encoding="utf-8", errors="replace"))]


def code_files(folder: Path) -> list[str]:
    """Return the sorted code files of `folder` that `trust_remote_code` loads: the regular files config.json names
    and, recursively, their relative imports. A config.json that cannot be read counts as naming no code."""
    try:
        config = read_json(folder / "config.json", CONFIG) if (folder / "config.json").is_file() else {}
    except UsageError:
        config = {}
    todo, found = referenced_code_files(config), set()
    while todo:
        name = todo.pop()
        if name not in found and (folder / name).is_file():
            found.add(name)
            todo += relative_imports(folder / name)
    return sorted(found)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def declared_files(folder: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Split the entries of `folder` into its declared files (those MODEL_FILES, HUB_FILES or `code_files` name) and
    the rest, and return the two lists, sorted. A declared name may be a symbolic link to a regular file (a Hub-cache
    snapshot links every file into its blobs/): it stands for the file it points at, which is what is copied or
    uploaded. A declared name that is not a regular file, itself or through its link (a folder, a FIFO, a link to
    nothing), raises a UsageError: skipping it would silently leave the weights out."""
    folder, kept, left = Path(folder), [], []
    code = code_files(folder)
    for entry in sorted(os.listdir(folder)):
        wanted = entry in code or _matches(entry, MODEL_FILES + HUB_FILES)
        if wanted and not (folder / entry).is_file():
            raise UsageError(
                f"{folder / entry} is {path_kind(folder / entry)}, not a file: a model folder's files are read, "
                "copied and uploaded as files; put the file itself there"
            )
        (kept if wanted else left).append(entry)
    return kept, left


def copy_model_files(
    source: str | os.PathLike,
    target: str | os.PathLike,
    *,
    only: Iterable[str] = MODEL_FILES,
    exclude: Iterable[str] = (),
    known: Iterable[str] = (),
) -> list[str]:
    """Copy into `target` the declared files of `source` that match `only` and not `exclude`, and return their names.
    By default `only` is MODEL_FILES, and then the code files config.json needs are copied as well. One warning line
    names the entries of `source` that are not declared files, except those that match `known`."""
    source, target = Path(source), Path(target)
    kept, left = declared_files(source)
    code = code_files(source) if only is MODEL_FILES else []
    copied = [n for n in kept if (n in code or _matches(n, only)) and not _matches(n, exclude)]
    for name in copied:
        shutil.copyfile(source / name, target / name)
    left = [n for n in left if not _matches(n, known)]
    if left:
        logger.warning(
            "%s: left out %d file(s) that are not a model folder's declared files: %s%s",
            source,
            len(left),
            ", ".join(left[:5]),
            f", ... ({len(left) - 5} more)" if len(left) > 5 else "",
        )
    return copied


def _looks_like_hub_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "/", "~")) and not Path(text).exists()


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """Return the safetensors files that hold a saved model's weights: the shards the index names, sorted
    (transformers' `save_pretrained(max_shard_size=...)` writes model-0000k-of-0000n.safetensors and
    model.safetensors.index.json), or else the one model.safetensors, or [] where there is neither. A shard the index
    names that is not a file of the folder itself (missing, or a path elsewhere) raises a UsageError."""
    folder = Path(folder)
    if not (folder / WEIGHTS_INDEX).is_file():
        return [folder / WEIGHTS] if (folder / WEIGHTS).is_file() else []
    index = read_json(folder / WEIGHTS_INDEX, WEIGHTS_INDEX_SHAPE)
    shards = sorted(set(index["weight_map"].values()))
    for shard in shards:
        if Path(shard).name != shard or not (folder / shard).is_file():
            raise UsageError(
                f"{folder / WEIGHTS_INDEX} names the weight shard {shard!r}, which is no file of {folder}; "
                "save the model again"
            )
    return [folder / shard for shard in shards]


def check_model_folder(
    path: str | os.PathLike, *, what: str = "model folder", tokenizer: bool = True, vaswani_only: bool = False
) -> Path | str:
    """Check a saved model folder cheaply, without loading its weights, and return it.

    It checks that config.json is this model's (or, unless `vaswani_only`, a transformers translation model's). It
    checks that generation_config.json, tokenizer_config.json, special_tokens_map.json and (when `tokenizer` is true)
    tokenizer.json exist where required and have their declared shapes (`vaswani_hf.io.files`). It checks that the
    safetensors weights exist, are complete, agree with their headers and are floating point. The function returns the folder as a Path, or the text itself for a Hub id
    (`org/name`) that is not a local path, which is checked when it is loaded. It raises a UsageError naming the
    missing or broken file."""
    if isinstance(path, str) and _looks_like_hub_id(path):
        return path
    folder = Path(path)
    if not folder.exists():
        raise UsageError(f"{what} not found: {folder}")
    if not folder.is_dir():
        raise UsageError(f"{what} {folder} is a file; give the folder that holds config.json")
    check_library_input(folder, f"{what} {folder}")
    config = read_json(
        folder / "config.json", CONFIG, what=f"config.json of {what} {folder} (written by save_pretrained)"
    )
    check_vaswani_config(config, folder / "config.json", vaswani_only)
    check_tokenizer_configs(folder)
    if (folder / "generation_config.json").is_file():
        check_generation_config_file(folder / "generation_config.json", config.get("vocab_size"))
    files = weight_files(folder)
    for path in files:
        check_weight_dtypes(check_safetensors(path), path)
    if not files:
        pickled = (
            " (pytorch_model.bin is not read: save with safetensors)"
            if (folder / "pytorch_model.bin").exists()
            else ""
        )
        raise UsageError(f"{folder}: no {WEIGHTS}{pickled}; give a folder written by save_pretrained")
    if tokenizer:
        if not (folder / "tokenizer.json").is_file():
            raise UsageError(
                f"{folder}: no tokenizer.json; save the tokenizer into the model folder "
                "(tokenizer.save_pretrained(folder))"
            )
        check_tokenizer_file(folder / "tokenizer.json")
    return folder


MODEL_TYPE, ARCHITECTURE = "vaswani", "VaswaniForConditionalGeneration"


def check_vaswani_config(config: dict, path: Path, vaswani_only: bool = False) -> None:
    """Check that `config` is a config.json of this package's model, and raise a UsageError naming the field if not.

    This package's model has model_type "vaswani" and, if listed, architectures of this model's class. Unless
    `vaswani_only`, the config of one of transformers' own translation models that names its class is accepted too (a
    `MarianMTModel` export, which the decoding and evaluation tools also take). Anything else, such as another model's
    type over our weights or a typo, would be loaded by transformers as that model (with a long load report and a
    traceback), or refused with advice about trust_remote_code."""
    model_type, names = config.get("model_type"), config.get("architectures")
    if model_type == MODEL_TYPE:
        expected = ARCHITECTURE
    else:
        expected = (
            MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
        )
        if expected is None or names is None or vaswani_only:
            raise UsageError(
                f'{path}: field model_type is {json.dumps(model_type)}, not "{MODEL_TYPE}": not a '
                "vaswani_hf model; give a folder written by vaswani-train (save_pretrained)"
            )
    if names is not None and (not isinstance(names, list) or any(n != expected for n in names)):
        raise UsageError(
            f"{path}: field architectures is {one_line(json.dumps(names), 80)}, not "
            f'["{expected}"] as model_type {json.dumps(model_type)} needs: another model\'s config; '
            "give a folder written by vaswani-train"
        )


def check_tokenizer_configs(folder: Path) -> None:
    """Check that tokenizer_config.json and special_tokens_map.json, where present, have their declared shapes, and
    that the special tokens they name (bos, eos, unk, pad) are tokens of tokenizer.json. A problem raises a UsageError
    naming the file and the field."""
    vocabulary = None
    for name, shape in (("tokenizer_config.json", TOKENIZER_CONFIG), ("special_tokens_map.json", SPECIAL_TOKENS_MAP)):
        if not (folder / name).is_file():
            continue
        data = read_json(folder / name, shape)
        for field in ("bos_token", "eos_token", "unk_token", "pad_token"):
            token = data.get(field)
            token = token.get("content") if isinstance(token, dict) else token
            if token is None or not (folder / "tokenizer.json").is_file():
                continue
            if vocabulary is None:
                vocabulary = check_tokenizer_file(folder / "tokenizer.json").get_vocab(with_added_tokens=True)
            if token not in vocabulary:  # transformers would add the token, which has no row in the model's embedding
                raise UsageError(
                    f"{folder / name}: field {field} is {json.dumps(token)}, a token tokenizer.json does "
                    "not have; save the tokenizer again (tokenizer.save_pretrained) or fix the field"
                )


def check_generation_config_file(path: str | os.PathLike, vocab_size: int | None = None) -> dict:
    """Check the generation_config.json of a model folder and return its contents. The file must hold a JSON object;
    one that does not is refused rather than silently replaced by transformers' defaults. Its settings must meet their
    declarations (`GENERATION_SETTINGS`), and its token ids must lie within `vocab_size` when that is known. A problem
    raises a UsageError naming the file and the setting."""
    data = read_json(path, GENERATION_CONFIG)
    vocab = vocab_size if isinstance(vocab_size, int) and not isinstance(vocab_size, bool) else None
    try:
        check_generation_settings(data, vocab, str(path))
    except SettingError as error:
        raise UsageError(f"{one_line(error)}; fix the file or save the model again") from None
    return data


# transformers' loader would cast integer weights to floating point silently, yet integer weights mean a damaged or
# foreign file: this package never saves a quantised model.
_FLOATING = frozenset({"F16", "BF16", "F32", "F64"})


def check_weight_dtypes(header: dict, path: Path) -> None:
    """Check that every tensor of a safetensors header (from `check_safetensors`) is floating point, as the model's
    parameters are, and raise a UsageError naming the first tensor that is not."""
    for name, entry in header.items():
        if name != "__metadata__" and entry["dtype"] not in _FLOATING:
            dtype = entry["dtype"].lower().replace("i", "int").replace("u", "uint").replace("f", "float")
            raise UsageError(
                f"{path}: tensor {name} is {dtype}; the model's weights are floating point: the file is "
                "damaged or not this model's: save the model again"
            )


def check_finite_weights(tensors, path) -> None:
    """Check that every floating-point tensor of `tensors` (a {name: tensor} mapping) holds only finite values, and
    raise a UsageError naming the first one that does not. NaN or infinity (from a diverged run, or a damaged file)
    would translate to empty lines, and would average into every checkpoint, without an error. The check costs one
    reduction per tensor, which is cheap next to reading the file."""
    import torch

    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UsageError(
                f"{path}: tensor {name} holds NaN/inf values; the checkpoint is damaged (a diverged "
                "run?): use an earlier checkpoint"
            )


def load_model_folder(
    path: str | os.PathLike,
    *,
    device=None,
    dtype=None,
    trust_remote_code: bool = False,
    what: str = "model folder",
    **model_kwargs,
):
    """Load a model and its tokenizer from a model folder or a Hub id, and return them as (model, tokenizer).

    The folder is checked first (`check_model_folder`) and then loaded through transformers' Auto classes, strictly,
    as the module docstring describes. The model is returned in eval mode, moved to `device` when one is given.
    `dtype` is the weights' dtype (a torch.dtype, or None for float32), and `model_kwargs` go to
    `from_pretrained`. This package registers its classes when it is imported, so `trust_remote_code` is needed only
    for folders of models whose code is not installed. A folder that cannot be loaded, or whose weights, config or
    tokenizer disagree, raises a UsageError naming it."""
    import torch
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    source = check_model_folder(path, what=what)
    where = f"{what} {source}" if isinstance(source, Path) else f"{what} {source} (not a local folder)"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), trust_remote_code=trust_remote_code)
        model, report = AutoModelForSeq2SeqLM.from_pretrained(
            str(source),
            dtype=dtype or torch.float32,
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
            **model_kwargs,
        )
    except StrictDataclassError as error:  # a config.json field of the wrong type
        raise UsageError(
            f"{where}: config.json does not describe a model ({one_line(error)}); fix the file or save the model again"
        ) from error
    except RuntimeError as error:  # transformers refuses tensors whose shapes differ from the config's
        if "mismatched" not in str(error) and "size" not in str(error):
            raise
        raise UsageError(
            f"{where}: the weights do not fit config.json (tensor shapes differ); the config and "
            "model.safetensors come from different models: save the model again"
        ) from error
    except (OSError, ValueError, KeyError) as error:  # a KeyError means a JSON file lacks keys transformers needs
        raise UsageError(f"{where}: cannot be loaded ({one_line(error)})") from error
    check_loading_report(report, where)
    check_finite_weights(dict(model.named_parameters()), source / WEIGHTS if isinstance(source, Path) else where)
    check_same_vocabulary(model, tokenizer)
    check_special_ids(model.config, tokenizer, where)
    if device is not None:
        model = model.to(device)
    return model.eval(), tokenizer


def check_loading_report(report: dict, where: str) -> None:
    """Refuse a load that left tensors of the model uninitialised or of the weights unused (a layer more or fewer)."""
    for key, meaning in (
        ("missing_keys", "missing from the weights (they would be random)"),
        ("unexpected_keys", "in the weights but not in the model config.json describes"),
        ("mismatched_keys", "of another shape than config.json says"),
    ):
        names = sorted(report.get(key) or [])
        if names:
            shown = ", ".join(str(n) for n in names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            raise UsageError(
                f"{where}: config.json and the weights disagree: tensors {meaning}: {shown}; the config "
                "and model.safetensors come from different models: save the model again"
            )


def check_special_ids(config, tokenizer, where: str) -> None:
    """Check that the tokenizer's padding, <s> and </s> ids are the model's, and raise a UsageError naming the first
    that differs. `config` is a mapping or a config object. A tokenizer_config.json that named another token would pad
    sources with a token the encoder attends to, or end sentences where the model never ends them."""
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        ours = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        ours, theirs = ours[0] if isinstance(ours, list) and ours else ours, getattr(tokenizer, name, None)
        if ours is not None and theirs is not None and ours != theirs:
            raise UsageError(
                f"{where}: the tokenizer's {name} is {theirs} but config.json's is {ours}; the "
                "tokenizer files (tokenizer_config.json, special_tokens_map.json) do not belong to this "
                "model: save the tokenizer again"
            )


# The tokenizer and the weights share one vocabulary. The model has one embedding matrix, indexed by the tokenizer's
# ids and sized `len(tokenizer)` (Section 3.4): a tokenizer of another size belongs to another model and would
# translate garbage without an error. Every place that pairs a tokenizer with weights checks here, before any work,
# from the files.


def tokenizer_tokens(tokenizer) -> dict[int, str]:
    """Return {id: token string} of a tokenizer object or of the tokenizer saved in a folder, added tokens included. A
    folder's tokenizer.json is checked (`check_tokenizer_file`) before it is read; a folder without one is loaded
    with AutoTokenizer."""
    if not isinstance(tokenizer, (str, os.PathLike)):
        return {index: token for token, index in tokenizer.get_vocab().items()}
    path = Path(tokenizer) / "tokenizer.json"
    if path.is_file():
        return {i: t for t, i in check_tokenizer_file(path).get_vocab(with_added_tokens=True).items()}
    from transformers import AutoTokenizer

    return tokenizer_tokens(AutoTokenizer.from_pretrained(str(tokenizer)))


def tokenizer_size(tokenizer) -> int:
    """Return `len(tokenizer)` of a tokenizer object or of the tokenizer saved in a folder, counting added tokens."""
    return len(tokenizer) if not isinstance(tokenizer, (str, os.PathLike)) else len(tokenizer_tokens(tokenizer))


def model_vocab_size(model) -> int:
    """Return the `vocab_size` of a model object (from its config) or of the config.json in a model folder; a folder
    whose field is missing or not an integer raises a UsageError."""
    if not isinstance(model, (str, os.PathLike)):
        return int(model.config.vocab_size)
    path = Path(model) / "config.json"
    config = read_json(path, CONFIG)
    if not isinstance(config.get("vocab_size"), int) or isinstance(config.get("vocab_size"), bool):
        raise UsageError(f"{path}: field vocab_size is missing or not an integer; save the model again")
    return config["vocab_size"]


def _label(source, what: str) -> str:
    return f"the {what} in {source}" if isinstance(source, (str, os.PathLike)) else f"the given {what}"


def check_same_vocabulary(model, tokenizer) -> None:
    """Check that the tokenizer has exactly as many tokens as the model's vocabulary, and otherwise raise a UsageError,
    in one line naming both (their folders, or "the given ...") and both sizes. `model` is a model object or folder;
    `tokenizer` is a tokenizer object or folder."""
    tokens, rows = tokenizer_size(tokenizer), model_vocab_size(model)
    if tokens != rows:
        raise UsageError(
            f"{_label(tokenizer, 'tokenizer')} has {tokens} tokens but {_label(model, 'model')} has "
            f"vocab_size {rows}: they are not one vocabulary; pair the model with the tokenizer it was "
            "trained with"
        )
