"""Hugging Face Hub integration: model card, one-commit upload, Inference Endpoints handler, native Marian export.

- `render_model_card` / `write_model_card`: a `huggingface_hub.ModelCard` rendered from the Jinja template
  `model_cards/vaswani_template.md` with `ModelCardData` metadata (language, license, library_name, pipeline_tag,
  tags, datasets, metrics, model-index results, widget examples). Architecture numbers are read from the model
  (parameter count from the weights); scores only from the metrics given. Nothing is invented: without metrics there
  is no results table and no model-index; invalid scores (NaN, strings) are refused.
- `push_folder`: `HfApi.create_repo` + ONE `create_commit` with exactly the files of `list_upload_files` (weights as
  safetensors, config with auto_map, code, tokenizer, generation config, metrics, card, handler). The token comes
  from the `token` argument, `HF_TOKEN` or the cached login (huggingface_hub resolves it) and is never printed.
- `add_handler`: copies `vaswani_hf/templates/handler.py` (Inference Endpoints `EndpointHandler`) into a folder.
- `export_marian`: a native `MarianMTModel` folder (exact conversion, `vaswani_hf.convert.to_marian`) with the
  tokenizer and a card, for widgets and endpoints that run built-in architectures only.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
HANDLER_TEMPLATE = TEMPLATES_DIR / "handler.py"
# The card template lives in the repository's `model_cards/` folder; `templates/model_card.md` is a link to it, which
# a wheel build copies into the package. Pass `template_path=` to use another one.
DEFAULT_CARD_TEMPLATE = TEMPLATES_DIR / "model_card.md"
METRICS_FILE = "metrics.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")

# ----------------------------------------------------------------------------------------------------------------------
# Metrics: normalisation and refusal of non-numbers
# ----------------------------------------------------------------------------------------------------------------------

# name -> (label in the card, Hub metric id for `metrics:` / model-index `type`)
METRIC_INFO = {
    "sacrebleu": ("sacreBLEU", "sacrebleu"),
    "bleu": ("BLEU (sacreBLEU)", "sacrebleu"),
    "chrf": ("chrF", "chrf"),
    "bleu_tok_compound_split": ("BLEU, tokenized + compound split (paper-style)", "bleu"),
    "bleu_tok_none": ("BLEU on given tokens (tokenize=none)", "bleu"),
}
# Trainer-only quantities that are not translation-quality scores: kept out of the results table.
_NOT_SCORES = {"loss", "runtime", "samples_per_second", "steps_per_second", "epoch", "gen_len", "step"}


def normalize_metrics(metrics: Mapping | None) -> dict[str, dict]:
    """Metrics in one form: `{name: {"score": float, "signature": str | None, "description": str | None}}`.

    Accepted inputs: `vaswani_hf.evaluation.compute_all`'s result (`{name: {"score", "signature", ...}}`), the JSON of
    `scripts/evaluate.py` (`{"scores": {...}, "meta": {...}}`), this module's `metrics.json` (`{"metrics": {...}}`),
    or flat numbers (`{"bleu": 27.3}`, Trainer's `{"eval_bleu": 27.3, "eval_loss": ...}`; the `eval_`/`test_`
    prefix is dropped, losses and throughput are not scores and are skipped).
    Raises ValueError on a score that is not a finite number: no placeholders.
    """
    if not metrics:
        return {}
    if "scores" in metrics and isinstance(metrics["scores"], Mapping):
        metrics = metrics["scores"]
    elif "metrics" in metrics and isinstance(metrics["metrics"], Mapping):
        metrics = metrics["metrics"]
    out: dict[str, dict] = {}
    for raw_name, value in metrics.items():
        name = re.sub(r"^(eval|test|predict)_", "", str(raw_name))
        if name in _NOT_SCORES or name.endswith("_loss"):
            continue
        if isinstance(value, Mapping):
            if "score" not in value:
                raise ValueError(f"metric {raw_name!r} has no 'score': {value!r}")
            score, signature, description = value["score"], value.get("signature"), value.get("description")
        else:
            score, signature, description = value, None, None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(float(score)):
            raise ValueError(
                f"metric {raw_name!r} = {score!r} is not a finite number; the card reports only real scores "
                "(leave the metric out instead of passing a placeholder)"
            )
        out[name] = {"score": float(score), "signature": signature or None, "description": description or None}
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Reading a model folder (or model object) without instantiating anything unnecessary
# ----------------------------------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        return sorted({model_dir / name for name in _read_json(index)["weight_map"].values()})
    single = model_dir / "model.safetensors"
    return [single] if single.is_file() else []


def count_parameters_in_folder(model_dir: str | os.PathLike) -> int:
    """Number of parameters stored in the folder's safetensors weights (tied matrices are stored, and counted, once)."""
    from safetensors import safe_open

    files = _weight_files(Path(model_dir))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {model_dir}")
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                total += math.prod(f.get_slice(key).get_shape())
    return total


def count_parameters(model) -> int:
    """Number of distinct parameters of a model object (a shared tensor counts once, as `parameters()` yields it).

    For a `MarianMTModel` converted by `to_marian`, the fixed sinusoid tables (`embed_positions`) and all-zero
    attention biases, which Marian stores as parameters but the paper's model does not have, are not counted, so the
    number equals the original model's."""
    total = 0
    for name, p in model.named_parameters():
        if getattr(model.config, "model_type", None) == "marian":
            if "embed_positions" in name:
                continue
            if name.endswith("_proj.bias") and "attn" in name and not bool(p.detach().abs().max() > 0):
                continue
        total += p.numel()
    return total


def _describe_source(model_dir_or_model) -> tuple[dict, dict, int, Path | None]:
    """(config dict, generation config dict, parameter count, folder or None)."""
    if isinstance(model_dir_or_model, (str, os.PathLike)):
        folder = Path(model_dir_or_model)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} has no config.json: is it a saved model folder?")
        config = _read_json(folder / "config.json")
        gen_path = folder / "generation_config.json"
        generation = _read_json(gen_path) if gen_path.is_file() else {}
        return config, generation, count_parameters_in_folder(folder), folder
    model = model_dir_or_model
    config = model.config.to_dict()
    generation = model.generation_config.to_dict() if getattr(model, "generation_config", None) is not None else {}
    return config, generation, count_parameters(model), None


def _format_count(n: int) -> str:
    if n >= 1e9:
        return f"{n:,} ({n / 1e9:.2f} B)"
    if n >= 1e6:
        return f"{n:,} ({n / 1e6:.1f} M)"
    return f"{n:,}"


def _architecture_rows(config: dict, num_parameters: int, variant: str) -> list[tuple[str, str]]:
    if config.get("model_type") == "marian":
        d_model, d_ff = config["d_model"], config["encoder_ffn_dim"]
        heads, n_enc, n_dec = config["encoder_attention_heads"], config["encoder_layers"], config["decoder_layers"]
        d_k = d_v = d_model // heads
        positions, tied = "sinusoidal ([sin | cos] layout)", config.get("tie_word_embeddings", True)
    else:
        d_model, d_ff, heads = config["d_model"], config["d_ff"], config["num_heads"]
        n_enc, n_dec = config["num_encoder_layers"], config["num_decoder_layers"]
        d_k, d_v = config.get("d_k") or d_model // heads, config.get("d_v") or d_model // heads
        positions = config.get("position_encoding", "sinusoidal")
        if positions == "sinusoidal":
            positions += f" ({config.get('sinusoid_layout', 'interleaved')} layout)"
        tied = config.get("tie_word_embeddings", True)
    rows = [
        ("Architecture",
         "MarianMTModel (converted)" if variant == "marian" else "Transformer encoder-decoder, post-norm"),
        ("Layers (encoder / decoder), N", f"{n_enc} / {n_dec}"),
        ("d_model", str(d_model)),
        ("d_ff", str(d_ff)),
        ("Attention heads, h", str(heads)),
        ("d_k / d_v", f"{d_k} / {d_v}"),
        ("Positional encoding", positions),
        ("Vocabulary (shared source/target)", f"{config['vocab_size']:,}"),
        ("Tied embeddings (encoder, decoder, pre-softmax)", "yes" if tied else "no"),
        ("Parameters", _format_count(num_parameters)),
    ]
    if variant != "marian" and config.get("attention_bias"):
        rows.append(("Attention projection biases", "yes (not in the paper)"))
    return rows


# ----------------------------------------------------------------------------------------------------------------------
# Card rendering
# ----------------------------------------------------------------------------------------------------------------------

# Known keys of `training_info`, in the order shown, with their labels. Other keys are shown after them as given.
TRAINING_FIELDS = [
    ("dataset_name", "Training data"),
    ("dataset", "Training data (Hub id)"),
    ("dataset_config", "Dataset configuration"),
    ("train_examples", "Training sentence pairs"),
    ("tokenizer", "Tokenizer"),
    ("steps", "Training steps"),
    ("epochs", "Epochs"),
    ("tokens_per_batch", "Tokens per batch"),
    ("batch_size", "Batch size"),
    ("optimizer", "Optimizer"),
    ("learning_rate", "Learning rate"),
    ("lr_schedule", "Learning-rate schedule"),
    ("warmup_steps", "Warm-up steps"),
    ("dropout", "Residual dropout P_drop"),
    ("label_smoothing", "Label smoothing epsilon_ls"),
    ("checkpoint_averaging", "Checkpoint averaging"),
    ("hardware", "Hardware"),
    ("training_time", "Training time"),
    ("seed", "Seed"),
]
# Keys that describe the run but are rendered elsewhere (metadata, evaluation, title).
_META_KEYS = {"source_lang", "target_lang", "license", "model_name", "eval_dataset", "widget_examples", "tags",
              "extra_limitations", "summary"}

# Default widget inputs by source language (example inputs, not results).
DEFAULT_WIDGET_TEXT = {
    "en": ["The weather is nice today.", "My friend bought a new house near the river."],
    "de": ["Das Wetter ist heute schön.", "Mein Freund hat ein neues Haus am Fluss gekauft."],
    "fr": ["Il fait beau aujourd'hui.", "Mon ami a acheté une nouvelle maison près de la rivière."],
}
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "ro": "Romanian", "ru": "Russian",
                  "es": "Spanish", "it": "Italian", "zh": "Chinese", "ja": "Japanese"}


def _cell(text: str) -> str:
    """Markdown table cell: a `|` (sacreBLEU signatures, |Y|) would end the cell, even inside backticks."""
    return str(text).replace("\n", " ").replace("|", "\\|")


def _rows(rows) -> list[tuple[str, str]]:
    return [(_cell(name), _cell(value)) for name, value in rows]


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_value(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_fmt_value(v)}" for k, v in value.items())
    return str(value)


def _decoding_rows(generation: dict, variant: str) -> list[tuple[str, str]]:
    rows = []
    if "num_beams" in generation:
        rows.append(("Beam size", str(generation["num_beams"])))
    if "length_penalty" in generation:
        kind = generation.get("length_penalty_type", "hf")
        formula = ("GNMT: score / ((5 + |Y|) / 6) ** alpha" if kind == "gnmt"
                   else "transformers: score / |Y| ** alpha")
        rows.append(("Length penalty alpha", f"{generation['length_penalty']:g} ({formula})"))
    if generation.get("max_length_b") is not None:
        a = generation.get("max_length_a", 1.0)
        rows.append(("Maximum output length", f"{a:g} x source length + {generation['max_length_b']} tokens"))
    elif generation.get("max_length") is not None and variant == "marian":
        rows.append(("Maximum output length", f"{generation['max_length']} tokens (global)"))
    if generation.get("early_stopping") is not None:
        rows.append(("early_stopping", str(generation["early_stopping"])))
    return rows


def _decoding_equivalent_in_marian(generation: dict) -> bool:
    """True when transformers' built-in beam search decodes like our `generate` with these settings."""
    return (generation.get("length_penalty_type", "hf") == "hf" or generation.get("num_beams", 1) == 1) and (
        generation.get("max_length_b") is None
    )


def render_model_card(
    model_dir_or_model,
    metrics: Mapping | None,
    training_info: Mapping,
    *,
    repo_id: str | None = None,
    template_path: str | os.PathLike | None = None,
    widget_examples: list[str] | None = None,
    variant: str = "vaswani",
    generation_config: Mapping | None = None,
) -> ModelCard:
    """Render the model card of a trained model from real numbers only.

    Args:
        model_dir_or_model: a saved folder (config.json, safetensors weights, optional generation_config.json) or a
            model object (`VaswaniForConditionalGeneration`, or a `MarianMTModel` with `variant="marian"`).
            Architecture and parameter count are read from it.
        metrics: scores of the run (see `normalize_metrics` for accepted forms), e.g. `compute_all(...)` or the
            JSON of `scripts/evaluate.py`; `None`/`{}` when there are none: the card then says so and carries no
            model-index. sacreBLEU signatures are shown when present.
        training_info: description of the run. Required: `source_lang`, `target_lang` (ISO 639-1 codes).
            Needed when `metrics` are given: `eval_dataset = {"name": "newstest2014", "id": "wmt/wmt14",
            "config": "de-en", "split": "test"}` (`name` required, the others recommended; refused otherwise,
            because a score without its test set means nothing).
            Optional metadata: `license` (default "apache-2.0", the code's license; set what the weights' data
            allow), `model_name`, `tags`, `widget_examples`, `summary`, `extra_limitations` (list of str).
            Optional training facts (shown in this order; omitted when absent): `dataset_name`, `dataset` (Hub id;
            also goes to the `datasets:` metadata), `dataset_config`, `train_examples`, `tokenizer`, `steps`,
            `epochs`, `tokens_per_batch`, `batch_size`, `optimizer`, `learning_rate`, `lr_schedule`,
            `warmup_steps`, `dropout`, `label_smoothing`, `checkpoint_averaging`, `hardware`, `training_time`,
            `seed`; any other key is shown as given.
        repo_id: used in the usage snippets (default: "path/to/model").
        template_path: Jinja template (default: `model_cards/vaswani_template.md`).
        widget_examples: source-language sentences for the Hub widget (default: `training_info["widget_examples"]`,
            else two built-in sentences for en/de/fr, else no widget).
        variant: "vaswani" (custom code repo) or "marian" (native MarianMTModel export).
        generation_config: the decoding settings the metrics were measured with (default: the model's
            `generation_config`); shown in the card's Decoding section.

    Returns:
        `huggingface_hub.ModelCard`; `card.data` is the `ModelCardData`.
    """
    if variant not in ("vaswani", "marian"):
        raise ValueError(f"variant must be 'vaswani' or 'marian', got {variant!r}")
    info = dict(training_info or {})
    src, tgt = info.get("source_lang"), info.get("target_lang")
    if not src or not tgt:
        raise ValueError("training_info needs 'source_lang' and 'target_lang' (ISO 639-1 codes, e.g. 'en', 'de')")
    config, generation, num_parameters, folder = _describe_source(model_dir_or_model)
    if generation_config is not None:
        generation = dict(generation_config)
    scores = normalize_metrics(metrics)
    eval_dataset = dict(info.get("eval_dataset") or {})
    if scores and not eval_dataset.get("name"):
        raise ValueError(
            "metrics were given without training_info['eval_dataset']['name']: say which test set they come from "
            "(e.g. {'name': 'newstest2014', 'id': 'wmt/wmt14', 'config': 'de-en', 'split': 'test'})"
        )

    src_name, tgt_name = LANGUAGE_NAMES.get(src, src), LANGUAGE_NAMES.get(tgt, tgt)
    model_name = info.get("model_name") or (repo_id.split("/")[-1] if repo_id else f"vaswani-transformer-{src}-{tgt}")

    # Evaluation results: body rows for every score, model-index entries only where the decoding is the measured one.
    decoding_same = variant != "marian" or _decoding_equivalent_in_marian(generation)
    results, eval_results = [], []
    for name, result in scores.items():
        label, metric_type = METRIC_INFO.get(name, (name, name))
        signature = result["signature"] or ""
        definition = result["description"] or ""
        signature_text = " - ".join(filter(None, [f"`{signature}`" if signature else "", definition])) or "-"
        results.append({"label": _cell(label), "score_text": f"{result['score']:.2f}",
                        "signature_text": _cell(signature_text)})
        if decoding_same:
            eval_results.append(EvalResult(
                task_type="translation",
                task_name=f"Translation {src_name} to {tgt_name}",
                dataset_type=eval_dataset.get("id") or eval_dataset["name"],
                dataset_name=eval_dataset["name"],
                dataset_config=eval_dataset.get("config"),
                dataset_split=eval_dataset.get("split"),
                metric_type=metric_type,
                metric_name=label,
                metric_value=round(result["score"], 2),
                metric_config=signature or None,
            ))
    results_note = ""
    if scores and not decoding_same:
        results_note = (
            "These scores were measured with the original implementation's decoding (see Decoding). The native "
            "MarianMTModel computes the same function, but transformers' built-in beam search normalises lengths "
            "differently and has no per-sentence length limit, so its translations, and scores, can differ "
            "slightly; they are therefore not declared as this repository's model-index results."
        )

    widgets = widget_examples if widget_examples is not None else info.get("widget_examples")
    if widgets is None:
        widgets = DEFAULT_WIDGET_TEXT.get(src)
    example_literal = repr(widgets[:1]) if widgets else repr(["..."])

    datasets = info.get("dataset")
    if datasets and isinstance(datasets, str):
        datasets = [datasets]
    if eval_dataset.get("id") and eval_dataset["id"] not in (datasets or []):
        datasets = [*(datasets or []), eval_dataset["id"]]
    tags = ["translation", "transformer", "attention-is-all-you-need", "vaswani2017", "seq2seq"]
    tags += ["marian"] if variant == "marian" else ["custom_code", "vaswani"]
    tags += list(info.get("tags") or [])
    metric_ids = sorted({METRIC_INFO.get(name, (name, name))[1] for name in scores}) or None

    card_data = ModelCardData(
        language=[src, tgt],
        license=info.get("license", "apache-2.0"),
        library_name="transformers",
        pipeline_tag="translation",
        tags=tags,
        datasets=datasets or None,
        metrics=metric_ids,
        model_name=model_name if eval_results else None,
        eval_results=eval_results or None,
        widget=[{"text": text} for text in widgets] if widgets else None,
    )

    training_rows = [(label, _fmt_value(info[key])) for key, label in TRAINING_FIELDS
                     if info.get(key) not in (None, "", [])]
    known = {key for key, _ in TRAINING_FIELDS} | _META_KEYS
    training_rows += [(key, _fmt_value(value)) for key, value in info.items()
                      if key not in known and value not in (None, "", [])]

    decoding_note = ""
    if variant == "marian" and not _decoding_equivalent_in_marian(generation):
        decoding_note = (
            "The original model decodes with the GNMT length penalty and a per-sentence length limit (input + 50); "
            "`generation_config.json` here keeps the beam size and alpha for transformers' built-in beam search, "
            "which divides by |Y| ** alpha instead and uses one global `max_length`."
        )
    summary = info.get("summary") or (
        f"A Transformer ({src_name} to {tgt_name}) trained with the recipe of Vaswani et al. (2017)."
    )
    eval_dataset_text = ", ".join(
        f"{k} `{eval_dataset[k]}`" if k != "name" else str(eval_dataset[k])
        for k in ("name", "id", "config", "split") if eval_dataset.get(k)
    )
    has_pipeline = bool(config.get("custom_pipelines"))
    has_handler = folder is not None and (folder / "handler.py").is_file()

    template = Path(template_path) if template_path is not None else DEFAULT_CARD_TEMPLATE
    if not template.is_file():
        raise FileNotFoundError(f"model card template not found: {template}")
    card = ModelCard.from_template(
        card_data,
        template_path=str(template),
        variant=variant,
        title=model_name,
        summary=summary,
        architecture=_rows(_architecture_rows(config, num_parameters, variant)),
        training_rows=_rows(training_rows),
        decoding_rows=_rows(_decoding_rows(generation, variant)),
        decoding_note=decoding_note,
        results=results,
        results_note=results_note,
        eval_dataset_text=eval_dataset_text,
        repo_id=repo_id or "path/to/model",
        example_literal=example_literal,
        direction=f"{src_name} to {tgt_name}",
        has_pipeline=has_pipeline,
        has_handler=has_handler,
        extra_limitations=list(info.get("extra_limitations") or []),
    )
    return card


def write_model_card(
    model_dir: str | os.PathLike,
    metrics: Mapping | None,
    training_info: Mapping,
    **kwargs,
) -> Path:
    """Render the card for the saved folder `model_dir` and write it as `README.md`; also write `metrics.json`
    (`{"metrics": normalised scores with signatures, "training_info": ..., "widget_examples": ...}`), the inputs of
    the card, which the Marian export reuses and the upload carries. Keyword arguments go to `render_model_card`.
    Returns the README path."""
    model_dir = Path(model_dir)
    card = render_model_card(model_dir, metrics, training_info, **kwargs)
    readme = model_dir / "README.md"
    card.save(readme)
    record = {"metrics": normalize_metrics(metrics), "training_info": dict(training_info)}
    if kwargs.get("widget_examples") is not None:
        record["widget_examples"] = list(kwargs["widget_examples"])
    (model_dir / METRICS_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return readme


def read_card_inputs(model_dir: str | os.PathLike) -> dict:
    """The `metrics.json` written by `write_model_card` (empty dict if there is none)."""
    path = Path(model_dir) / METRICS_FILE
    return _read_json(path) if path.is_file() else {}


# ----------------------------------------------------------------------------------------------------------------------
# Inference Endpoints handler
# ----------------------------------------------------------------------------------------------------------------------


def add_handler(folder: str | os.PathLike) -> Path:
    """Copy the Inference Endpoints custom handler (`EndpointHandler`) into `folder` as `handler.py`, and a
    `requirements.txt` naming transformers 5 (the endpoint image may ship an older one) unless one exists.
    Returns the handler's path."""
    folder = Path(folder)
    target = folder / "handler.py"
    shutil.copyfile(HANDLER_TEMPLATE, target)
    requirements = folder / "requirements.txt"
    if not requirements.exists():
        requirements.write_text("transformers>=5.0,<6\nsafetensors>=0.4\n", encoding="utf-8")
    return target


# ----------------------------------------------------------------------------------------------------------------------
# Upload
# ----------------------------------------------------------------------------------------------------------------------

# Top-level files of a model folder that are uploaded; anything else (checkpoints, optimizer states, pickled weights,
# logs) stays local. `list_upload_files` is the single source of truth for both the dry run and the commit.
UPLOAD_PATTERNS = (
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "*.py",  # configuration/modeling/pipeline code (auto_map, custom_pipelines) and handler.py
    "requirements.txt",  # for handler.py on Inference Endpoints
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "*.spm",
    METRICS_FILE,
    "training_metrics.json",  # written by vaswani_hf.training.export_hub_folder, with recipe.yaml and plots
    "recipe.yaml",
    "*.png",
    "all_results.json",
    "eval_results.json",
    "train_results.json",
    "test_results.json",
    "scores.json",
)


def list_upload_files(model_dir: str | os.PathLike) -> list[tuple[str, int]]:
    """`[(path in repo, size in bytes)]` of the files `push_folder` uploads from `model_dir`, sorted."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model folder not found: {model_dir}")
    files = []
    for path in sorted(model_dir.iterdir()):
        if path.is_file() and any(fnmatch.fnmatchcase(path.name, pattern) for pattern in UPLOAD_PATTERNS):
            files.append((path.name, path.stat().st_size))
    return files


_RELATIVE_IMPORT = re.compile(r"^\s*from\s+\.([A-Za-z_][A-Za-z0-9_]*)\s+import\s", re.MULTILINE)


def check_folder(model_dir: str | os.PathLike, files: list[tuple[str, int]] | None = None) -> list[str]:
    """Problems that would make the uploaded repository unusable (empty list: none)."""
    model_dir = Path(model_dir)
    names = {name for name, _ in (files if files is not None else list_upload_files(model_dir))}
    problems = []
    if "config.json" not in names:
        return [f"{model_dir} has no config.json"]
    config = _read_json(model_dir / "config.json")
    if not any(n == "model.safetensors" or fnmatch.fnmatchcase(n, "model-*-of-*.safetensors") for n in names):
        extra = " (pickled pytorch_model.bin is not uploaded: save with safetensors)" if (
            model_dir / "pytorch_model.bin").exists() else ""
        problems.append(f"no safetensors weights{extra}")
    if "tokenizer.json" not in names and "tokenizer_config.json" not in names:
        problems.append("no tokenizer files (save the tokenizer into the folder)")
    if "README.md" not in names:
        problems.append("no README.md model card (vaswani_hf.hub.write_model_card writes one)")
    else:
        try:
            ModelCard((model_dir / "README.md").read_text(encoding="utf-8"))
        except Exception as error:  # noqa: BLE001 - report any parse error of the card
            problems.append(f"README.md metadata does not parse: {error}")
    if config.get("model_type") == "vaswani":
        auto_map = config.get("auto_map") or {}
        if "AutoConfig" not in auto_map or "AutoModelForSeq2SeqLM" not in auto_map:
            problems.append("config.json has no auto_map for AutoConfig/AutoModelForSeq2SeqLM (import vaswani_hf "
                            "before save_pretrained: it registers the classes for remote code)")
        referenced = [ref for value in auto_map.values() for ref in (value if isinstance(value, list) else [value])
                      if isinstance(ref, str)]
        for pipeline in (config.get("custom_pipelines") or {}).values():
            impl = pipeline.get("impl") if isinstance(pipeline, Mapping) else None
            if impl:
                referenced.append(impl)
        for ref in referenced:
            module = ref.split("--")[-1].rsplit(".", 1)[0]
            if f"{module}.py" not in names:
                problems.append(f"code file {module}.py referenced by config.json is missing")
    for name in sorted(n for n in names if n.endswith(".py")):
        for module in _RELATIVE_IMPORT.findall((model_dir / name).read_text(encoding="utf-8")):
            if f"{module}.py" not in names:
                problems.append(f"{name} imports .{module}, but {module}.py is not in the folder")
    return problems


def _format_size(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def push_folder(
    model_dir: str | os.PathLike,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    commit_message: str = "Upload Vaswani Transformer (weights, code, tokenizer, card)",
    commit_description: str | None = None,
    out=None,
):
    """Upload the files of `list_upload_files(model_dir)` to `repo_id` in ONE commit.

    Creates the repository if needed (`private` applies only then) and the branch `revision` if it does not exist.
    The token is `token`, else `HF_TOKEN`, else the cached login (`hf auth login`); it is never printed.
    With `dry_run`, prints and returns the files (path, size) without any network call.
    Returns the `CommitInfo` of the commit (or the file list for a dry run). Raises ValueError if the folder would
    give an unusable repository (see `check_folder`).
    """
    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    out = out or sys.stdout
    model_dir = Path(model_dir)
    files = list_upload_files(model_dir)
    problems = check_folder(model_dir, files)
    if problems:
        raise ValueError(f"{model_dir} is not ready to upload:\n- " + "\n- ".join(problems))
    if dry_run:
        total = sum(size for _, size in files)
        print(f"dry run: would upload {len(files)} files ({_format_size(total)}) to {repo_id}"
              f"{' (private)' if private else ''} @ {revision or 'main'} in one commit:", file=out)
        for name, size in files:
            print(f"  {name}  {size} bytes ({_format_size(size)})", file=out)
        uploaded = {name for name, _ in files}
        skipped = sorted(p.name + ("/" if p.is_dir() else "") for p in model_dir.iterdir() if p.name not in uploaded)
        if skipped:
            print("not uploaded: " + ", ".join(skipped), file=out)
        return files

    if token is None and get_token() is None:
        raise RuntimeError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (the token is never printed)")
    api = HfApi(token=token)
    user = api.whoami()
    print(f"authenticated as {user.get('name', '?')}", file=out)
    repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    if revision not in (None, "main"):
        api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(model_dir / name)) for name, _ in files]
    info = api.create_commit(
        repo_id,
        operations,
        commit_message=commit_message,
        commit_description=commit_description,
        revision=revision,
        repo_type="model",
    )
    print(f"uploaded {len(files)} files to {repo_url} in commit {info.oid}", file=out)
    return info


# ----------------------------------------------------------------------------------------------------------------------
# Native MarianMTModel export
# ----------------------------------------------------------------------------------------------------------------------


def marian_generation_config(generation: dict, config) -> "GenerationConfig":  # noqa: F821
    """Our decoding settings restricted to what transformers' built-in `generate` understands."""
    from transformers import GenerationConfig

    keys = ("num_beams", "length_penalty", "early_stopping", "no_repeat_ngram_size")
    settings = {key: generation[key] for key in keys if generation.get(key) is not None}
    return GenerationConfig(
        **settings,
        max_length=config.max_position_embeddings,  # Marian's sinusoid table has this many rows
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        forced_eos_token_id=None,
    )


def export_marian(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    metrics: Mapping | None = None,
    training_info: Mapping | None = None,
    repo_id: str | None = None,
) -> Path:
    """Write a native `MarianMTModel` folder computing exactly the function of the `vaswani_hf` model in `model_dir`,
    with its tokenizer (our `tokenizer.json`, loaded by `AutoTokenizer`), a generation config and a card.

    `metrics` / `training_info` default to the `metrics.json` written by `write_model_card` in `model_dir`; without
    `training_info` (languages), no card is written. Returns `out_dir`.
    """
    from transformers import AutoTokenizer

    from .convert import to_marian
    from .modeling_vaswani import VaswaniForConditionalGeneration

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if out_dir.resolve() == model_dir.resolve():
        raise ValueError("--out must differ from --model_dir")
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir).eval()
    marian = to_marian(model).eval()
    gen_path = model_dir / "generation_config.json"
    generation = _read_json(gen_path) if gen_path.is_file() else model.generation_config.to_dict()
    marian.generation_config = marian_generation_config(generation, model.config)
    out_dir.mkdir(parents=True, exist_ok=True)
    marian.save_pretrained(out_dir)
    # the tokenizer files as they are (loading and re-saving would add loader state to tokenizer_config.json)
    copied = [name for name in TOKENIZER_FILES if (model_dir / name).is_file()]
    if "tokenizer.json" not in copied:
        raise FileNotFoundError(f"{model_dir} has no tokenizer.json (the fast tokenizer the Marian folder uses)")
    for name in copied:
        shutil.copyfile(model_dir / name, out_dir / name)
    tokenizer_config = out_dir / "tokenizer_config.json"
    if tokenizer_config.is_file():
        # transformers 5 saves `tokenizer_class: "TokenizersBackend"`, a name transformers 4 does not know; serving
        # stacks may run 4.x. "PreTrainedTokenizerFast" (tokenizer.json) is understood by both.
        settings = _read_json(tokenizer_config)
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        tokenizer_config.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    AutoTokenizer.from_pretrained(out_dir)  # fail here, not on the Hub, if the copy does not load

    record = read_card_inputs(model_dir)
    metrics = metrics if metrics is not None else record.get("metrics")
    training_info = training_info if training_info is not None else record.get("training_info")
    if training_info:
        # the card's decoding section describes the settings the scores were measured with (the original model's)
        card = render_model_card(marian, metrics, training_info, repo_id=repo_id, variant="marian",
                                 widget_examples=record.get("widget_examples"), generation_config=generation)
        card.save(out_dir / "README.md")
    return out_dir


__all__ = [
    "render_model_card",
    "write_model_card",
    "read_card_inputs",
    "normalize_metrics",
    "count_parameters",
    "count_parameters_in_folder",
    "add_handler",
    "list_upload_files",
    "check_folder",
    "push_folder",
    "export_marian",
    "marian_generation_config",
    "UPLOAD_PATTERNS",
]
