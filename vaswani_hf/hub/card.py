"""Render the model card, a `huggingface_hub.ModelCard`, from real numbers only.

The card is rendered from the Jinja template `vaswani_hf/templates/model_card.md` (a link to the repository's
`model_cards/vaswani_template.md`), with `ModelCardData` metadata: language, license, library_name, pipeline_tag,
tags, datasets, metrics, model-index results and widget examples.

The architecture numbers are read from the model (the parameter count from its weights), and the scores come only
from the metrics given. Nothing is invented: without metrics there is no results table and no model-index, and a
score that is not a number (NaN, a string) is refused. The card itself (its YAML header, the model-index) is
huggingface_hub's; only the body's tables are built here.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..io import check_safetensors, read_json, weight_files
from .ids import check_card_identity  # The exports also import it from here.

PACKAGE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
# The card template lives in the repository's `model_cards/` folder; `templates/model_card.md` is a link to it, which a
# wheel build copies into the package. Pass `template_path=` to use another one.
DEFAULT_CARD_TEMPLATE = TEMPLATES_DIR / "model_card.md"
METRICS_FILE = "metrics.json"
# The repository id a card's usage snippets show until the folder is pushed (`hub.upload` then writes the pushed id).
LOCAL_REPO_ID = "path/to/model"

# Maps a metric's name to its label in the card and its Hub metric id (for `metrics:` and the model-index `type`).
METRIC_INFO = {
    "sacrebleu": ("sacreBLEU", "sacrebleu"),
    "bleu": ("BLEU (sacreBLEU)", "sacrebleu"),
    "chrf": ("chrF", "chrf"),
    "bleu_tok_compound_split": ("BLEU, tokenized + compound split (paper-style)", "bleu"),
    "bleu_tok_none": ("BLEU on given tokens (tokenize=none)", "bleu"),
}
# Trainer-only quantities that are not translation-quality scores, kept out of the results table.
_NOT_SCORES = {"loss", "runtime", "samples_per_second", "steps_per_second", "epoch", "gen_len", "step"}

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
_META_KEYS = {
    "source_lang",
    "target_lang",
    "license",
    "model_name",
    "eval_dataset",
    "widget_examples",
    "tags",
    "extra_limitations",
    "summary",
}

# The Hub widget's default inputs by source language. They are example inputs, not results.
DEFAULT_WIDGET_TEXT = {
    "en": ["The weather is nice today.", "My friend bought a new house near the river."],
    "de": ["Das Wetter ist heute schön.", "Mein Freund hat ein neues Haus am Fluss gekauft."],
    "fr": ["Il fait beau aujourd'hui.", "Mon ami a acheté une nouvelle maison près de la rivière."],
}
LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "cs": "Czech",
    "ro": "Romanian",
    "ru": "Russian",
    "es": "Spanish",
    "it": "Italian",
    "zh": "Chinese",
    "ja": "Japanese",
}


@dataclass(frozen=True)
class Architecture:
    """Hold the card's architecture table, as `CardVariant.architecture` reads it from a config.json."""

    name: str
    encoder_layers: int
    decoder_layers: int
    d_model: int
    d_ff: int
    heads: int
    d_k: int
    d_v: int
    positions: str
    vocab_size: int
    tied: bool
    attention_bias: bool = False  # Shown only when the model has biases, because the paper's has none.


@dataclass(frozen=True)
class CardVariant:
    """Describe how a card presents one kind of repository.

    `name` selects the template's text (introduction, usage), `tags` go to the metadata, `architecture` reads the
    table from config.json, and `count_parameters` counts a model object's parameters as the paper does.
    `decodes_as_measured(generation config)` says whether the repository's own `generate()` decodes as the scores
    were measured; if it does not, the scores stay in the body but out of the model-index, and `results_note` and
    `decoding_note` say why. `global_max_length` shows a global `max_length` when there is no per-sentence limit."""

    name: str
    tags: tuple[str, ...]
    architecture: Callable[[dict], Architecture]
    count_parameters: Callable[[Any], int]
    decodes_as_measured: Callable[[dict], bool] = lambda generation: True
    decoding_note: str = ""
    results_note: str = ""
    global_max_length: bool = False


def normalize_metrics(metrics: Mapping | None) -> dict[str, dict]:
    """Return metrics in one form, `{name: {"score": float, "signature": str | None, "description": str | None}}`.

    The accepted inputs are `vaswani_hf.metrics.scores.compute_all`'s result (`{name: {"score", "signature", ...}}`),
    the JSON of the evaluation tool (`{"scores": {...}, "meta": {...}}`), this module's `metrics.json`
    (`{"metrics": {...}}`), and flat numbers (`{"bleu": 27.3}`, or the Trainer's `{"eval_bleu": 27.3, "eval_loss":
    ...}`, whose `eval_`, `test_` or `predict_` prefix is dropped; losses and throughput are not scores and are
    skipped). A score that is not a finite number raises a ValueError, because the card takes no placeholders."""
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


def count_parameters_in_folder(model_dir: str | os.PathLike) -> int:
    """Return the number of parameters stored in the folder's safetensors weights, read from their checked headers.

    Tied matrices are stored once, so they are counted once."""
    files = weight_files(model_dir)
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {model_dir}")
    return sum(
        math.prod(entry["shape"])
        for file in files
        for name, entry in check_safetensors(file).items()
        if name != "__metadata__"
    )


def count_parameters(model) -> int:
    """Return the number of distinct parameters of a model object; a shared tensor counts once, as `parameters()`
    yields it once."""
    return sum(p.numel() for p in model.parameters())


def _describe_source(model_dir_or_model, variant: CardVariant) -> tuple[dict, dict, int, Path | None]:
    """Return what the card reads from a saved folder or a model object.

    That is (config dict, generation config dict, parameter count, the folder or None for a model object)."""
    if isinstance(model_dir_or_model, (str, os.PathLike)):
        folder = Path(model_dir_or_model)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} has no config.json: is it a saved model folder?")
        config = read_json(folder / "config.json")
        gen_path = folder / "generation_config.json"
        generation = read_json(gen_path) if gen_path.is_file() else {}
        return config, generation, count_parameters_in_folder(folder), folder
    model = model_dir_or_model
    config = model.config.to_dict()
    generation = model.generation_config.to_dict() if getattr(model, "generation_config", None) is not None else {}
    return config, generation, variant.count_parameters(model), None


def _format_count(n: int) -> str:
    if n >= 1e9:
        return f"{n:,} ({n / 1e9:.2f} B)"
    if n >= 1e6:
        return f"{n:,} ({n / 1e6:.1f} M)"
    return f"{n:,}"


def vaswani_architecture(config: dict) -> Architecture:
    """Return the architecture table of a `vaswani` config.json."""
    d_model, heads = config["d_model"], config["num_heads"]
    positions = config.get("position_encoding", "sinusoidal")
    if positions == "sinusoidal":
        positions += f" ({config.get('sinusoid_layout', 'interleaved')} layout)"
    return Architecture(
        name="Transformer encoder-decoder, post-norm",
        encoder_layers=config["num_encoder_layers"],
        decoder_layers=config["num_decoder_layers"],
        d_model=d_model,
        d_ff=config["d_ff"],
        heads=heads,
        d_k=config.get("d_k") or d_model // heads,
        d_v=config.get("d_v") or d_model // heads,
        positions=positions,
        vocab_size=config["vocab_size"],
        tied=config.get("tie_word_embeddings", True),
        attention_bias=bool(config.get("attention_bias")),
    )


def _architecture_rows(arch: Architecture, num_parameters: int) -> list[tuple[str, str]]:
    rows = [
        ("Architecture", arch.name),
        ("Layers (encoder / decoder), N", f"{arch.encoder_layers} / {arch.decoder_layers}"),
        ("d_model", str(arch.d_model)),
        ("d_ff", str(arch.d_ff)),
        ("Attention heads, h", str(arch.heads)),
        ("d_k / d_v", f"{arch.d_k} / {arch.d_v}"),
        ("Positional encoding", arch.positions),
        ("Vocabulary (shared source/target)", f"{arch.vocab_size:,}"),
        ("Tied embeddings (encoder, decoder, pre-softmax)", "yes" if arch.tied else "no"),
        ("Parameters", _format_count(num_parameters)),
    ]
    if arch.attention_bias:
        rows.append(("Attention projection biases", "yes (not in the paper)"))
    return rows


# This package's model, whose code is in the repository (trust_remote_code), so that it decodes as the scores were
# measured.
VASWANI_CARD = CardVariant("vaswani", ("custom_code", "vaswani"), vaswani_architecture, count_parameters)


def _cell(text: str) -> str:
    """Return `text` made safe for a Markdown table cell: `|` escaped and each line break turned into a space.

    A `|` (in a sacreBLEU signature, or |Y|) would end the cell even inside backticks."""
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


def _training_rows(info: Mapping) -> list[tuple[str, str]]:
    """Return rows for the known training facts in TRAINING_FIELDS order, then other keys, leaving out empty ones."""
    rows = [(label, _fmt_value(info[key])) for key, label in TRAINING_FIELDS if info.get(key) not in (None, "", [])]
    known = {key for key, _ in TRAINING_FIELDS} | _META_KEYS
    rows += [
        (key, _fmt_value(value)) for key, value in info.items() if key not in known and value not in (None, "", [])
    ]
    return rows


def _decoding_rows(generation: dict, variant: CardVariant) -> list[tuple[str, str]]:
    rows = []
    if "num_beams" in generation:
        rows.append(("Beam size", str(generation["num_beams"])))
    if "length_penalty" in generation:
        kind = generation.get("length_penalty_type", "hf")
        formula = "GNMT: score / ((5 + |Y|) / 6) ** alpha" if kind == "gnmt" else "transformers: score / |Y| ** alpha"
        rows.append(("Length penalty alpha", f"{generation['length_penalty']:g} ({formula})"))
    if generation.get("max_length_b") is not None:
        a = generation.get("max_length_a", 1.0)
        rows.append(("Maximum output length", f"{a:g} x source length + {generation['max_length_b']} tokens"))
    elif generation.get("max_length") is not None and variant.global_max_length:
        rows.append(("Maximum output length", f"{generation['max_length']} tokens (global)"))
    if generation.get("early_stopping") is not None:
        rows.append(("early_stopping", str(generation["early_stopping"])))
    return rows


def _results(scores: dict, eval_dataset: dict, direction: str, declare: bool) -> tuple[list[dict], list[EvalResult]]:
    """Return the rows of the body's results table and the model-index entries.

    Every score gets a row, but it is declared in the model-index only when `declare` is true, that is when the
    repository decodes as the scores were measured."""
    rows, eval_results = [], []
    for name, result in scores.items():
        label, metric_type = METRIC_INFO.get(name, (name, name))
        signature = result["signature"] or ""
        definition = result["description"] or ""
        signature_text = " - ".join(filter(None, [f"`{signature}`" if signature else "", definition])) or "-"
        rows.append(
            {"label": _cell(label), "score_text": f"{result['score']:.2f}", "signature_text": _cell(signature_text)}
        )
        if declare:
            eval_results.append(
                EvalResult(
                    task_type="translation",
                    task_name=f"Translation {direction}",
                    dataset_type=eval_dataset.get("id") or eval_dataset["name"],
                    dataset_name=eval_dataset["name"],
                    dataset_config=eval_dataset.get("config"),
                    dataset_split=eval_dataset.get("split"),
                    metric_type=metric_type,
                    metric_name=label,
                    metric_value=round(result["score"], 2),
                    metric_config=signature or None,
                )
            )
    return rows, eval_results


def _eval_dataset_text(eval_dataset: dict) -> str:
    return ", ".join(
        f"{k} `{eval_dataset[k]}`" if k != "name" else str(eval_dataset[k])
        for k in ("name", "id", "config", "split")
        if eval_dataset.get(k)
    )


def _check_card_inputs(variant: CardVariant, info: dict, scores: dict) -> dict:
    """Return the evaluation set of `info`, raising a ValueError for anything that would make a misleading card."""
    if not isinstance(variant, CardVariant):
        raise ValueError(f"variant must be a CardVariant (VASWANI_CARD, or an export's), got {variant!r}")
    if not info.get("source_lang") or not info.get("target_lang"):
        raise ValueError("training_info needs 'source_lang' and 'target_lang' (ISO 639-1 codes, e.g. 'en', 'de')")
    check_card_identity(None, info["source_lang"], info["target_lang"])
    eval_dataset = dict(info.get("eval_dataset") or {})
    if scores and not eval_dataset.get("name"):
        raise ValueError(
            "metrics were given without training_info['eval_dataset']['name']: say which test set they come from "
            "(e.g. {'name': 'newstest2014', 'id': 'wmt/wmt14', 'config': 'de-en', 'split': 'test'})"
        )
    return eval_dataset


def _card_data(
    info: dict,
    scores: dict,
    eval_dataset: dict,
    variant: CardVariant,
    model_name: str,
    eval_results: list,
    widgets: list[str] | None,
) -> ModelCardData:
    """Return the card's YAML metadata as huggingface_hub's `ModelCardData`."""
    datasets = info.get("dataset")
    if datasets and isinstance(datasets, str):
        datasets = [datasets]
    if eval_dataset.get("id") and eval_dataset["id"] not in (datasets or []):
        datasets = [*(datasets or []), eval_dataset["id"]]
    tags = ["translation", "transformer", "attention-is-all-you-need", "vaswani2017", "seq2seq"]
    tags += list(variant.tags)
    tags += list(info.get("tags") or [])
    metric_ids = sorted({METRIC_INFO.get(name, (name, name))[1] for name in scores}) or None
    return ModelCardData(
        language=[info["source_lang"], info["target_lang"]],
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


def render_model_card(
    model_dir_or_model,
    metrics: Mapping | None,
    training_info: Mapping,
    *,
    repo_id: str | None = None,
    template_path: str | os.PathLike | None = None,
    widget_examples: list[str] | None = None,
    variant: CardVariant | None = None,
    generation_config: Mapping | None = None,
) -> ModelCard:
    """Render the model card of a trained model from real numbers only, and return it as a `huggingface_hub.ModelCard`.

    The card's `card.data` is its `ModelCardData`.

    `model_dir_or_model` is a saved folder (config.json, safetensors weights, optionally generation_config.json) or a
    model object (`VaswaniForConditionalGeneration`, or an export's model with that export's `variant`); the
    architecture and the parameter count are read from it. `metrics` are the scores of the run, in any form
    `normalize_metrics` accepts; with None or {} the card says there are none and has no model-index.
    `training_info` needs `source_lang` and `target_lang` (ISO 639-1 codes), and with metrics also `eval_dataset =
    {"name", "id", "config", "split"}`, where `name` is required because a score without its test set means nothing.
    Its optional keys are `license` (default "apache-2.0"), `model_name`, `tags`, `widget_examples`, `summary`,
    `extra_limitations` and the training facts of TRAINING_FIELDS; any other key is shown as given.

    `repo_id` goes into the usage snippets, and `template_path` names another Jinja template. `widget_examples` are the
    Hub widget's inputs; by default they are training_info's, else two built-in sentences for en, de or fr. `variant`
    is the kind of repository: `VASWANI_CARD` by default (this package's model with its code), while an export brings
    its own, such as `vaswani_hf.export.marian.MARIAN_CARD`. `generation_config` is the decoding the metrics were
    measured with, by default the model's."""
    variant = VASWANI_CARD if variant is None else variant
    info = dict(training_info or {})
    scores = normalize_metrics(metrics)
    eval_dataset = _check_card_inputs(variant, info, scores)
    src, tgt = info["source_lang"], info["target_lang"]
    config, generation, num_parameters, folder = _describe_source(model_dir_or_model, variant)
    if generation_config is not None:
        generation = dict(generation_config)
    src_name, tgt_name = LANGUAGE_NAMES.get(src, src), LANGUAGE_NAMES.get(tgt, tgt)
    model_name = info.get("model_name") or (repo_id.split("/")[-1] if repo_id else f"vaswani-transformer-{src}-{tgt}")
    # Every score gets a row in the body, but a model-index entry only where this repository decodes as the scores
    # were measured.
    decoding_same = variant.decodes_as_measured(generation)
    results, eval_results = _results(scores, eval_dataset, f"{src_name} to {tgt_name}", decoding_same)
    widgets = widget_examples if widget_examples is not None else info.get("widget_examples")
    if widgets is None:
        widgets = DEFAULT_WIDGET_TEXT.get(src)
    template = Path(template_path) if template_path is not None else DEFAULT_CARD_TEMPLATE
    if not template.is_file():
        raise FileNotFoundError(f"model card template not found: {template}")
    return ModelCard.from_template(
        _card_data(info, scores, eval_dataset, variant, model_name, eval_results, widgets),
        template_path=str(template),
        variant=variant.name,
        title=model_name,
        summary=info.get("summary")
        or (f"A Transformer ({src_name} to {tgt_name}) trained with the recipe of Vaswani et al. (2017)."),
        architecture=_rows(_architecture_rows(variant.architecture(config), num_parameters)),
        training_rows=_rows(_training_rows(info)),
        decoding_rows=_rows(_decoding_rows(generation, variant)),
        decoding_note=variant.decoding_note if not decoding_same else "",
        results=results,
        results_note=variant.results_note if scores and not decoding_same else "",
        eval_dataset_text=_eval_dataset_text(eval_dataset),
        repo_id=repo_id or LOCAL_REPO_ID,
        example_literal=repr(widgets[:1]) if widgets else repr(["..."]),
        direction=f"{src_name} to {tgt_name}",
        has_pipeline=bool(config.get("custom_pipelines")),
        has_handler=folder is not None and (folder / "handler.py").is_file(),
        extra_limitations=list(info.get("extra_limitations") or []),
    )


def write_model_card(model_dir: str | os.PathLike, metrics: Mapping | None, training_info: Mapping, **kwargs) -> Path:
    """Render the card of the saved folder `model_dir`, write it as `README.md`, and return the README's path.

    It also writes `metrics.json` (`{"metrics": normalised scores with signatures, "training_info": ...,
    "widget_examples": ...}`), the inputs of the card, which the Marian export reuses to write its own card and the
    upload carries. Keyword arguments go to `render_model_card`."""
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
    """Return the `metrics.json` that `write_model_card` wrote, or {} if there is none.

    A broken file raises a UsageError naming it."""
    path = Path(model_dir) / METRICS_FILE
    return read_json(path, what=METRICS_FILE) if path.is_file() else {}
