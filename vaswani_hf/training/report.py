"""What a training run leaves for people to read: plots, metrics JSON, hypotheses, and the Hub-ready folder.

The folder export is `vaswani_hf.hub`'s model folder (weights, code, tokenizer, pipeline, handler, card) plus the
run's own files: `training_metrics.json` (everything measured), `recipe.yaml`, the PNG plots.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..io import atomic_output_dir, check_output_dir, write_lines

logger = logging.getLogger(__name__)


def write_json(path: str | os.PathLike, data: Any) -> None:
    """JSON written atomically (temporary file, then rename); numbers from numpy/torch and paths as themselves."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default), encoding="utf-8")
    os.replace(tmp, path)


def _json_default(o):
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def recipe_yaml(recipe: Mapping[str, Any]) -> str:
    """The full recipe as YAML (every key, defaults included)."""
    return yaml.safe_dump(dict(recipe), sort_keys=False)


def write_hypotheses(path: str | os.PathLike, tokenizer, predictions) -> None:
    """The decoded translations of an evaluation, one line per evaluated sentence in corpus order (as
    `VaswaniTrainer.evaluation_loop` returns them, whatever the number of processes). The file belongs to this run:
    it is replaced."""
    texts = tokenizer.batch_decode(predictions, skip_special_tokens=True)
    write_lines(path, [t.strip() for t in texts], overwrite=True)


def plot_history(history: Sequence[dict], out_dir: str | os.PathLike) -> dict[str, str]:
    """PNG plots of the training loss (and validation loss), the learning rate and validation BLEU (by step and by
    wall-clock time). Returns {name: path} of the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "eval_loss" in h]
    bleu = [h for h in history if "eval_bleu" in h]
    written = {}

    if train or evals:
        fig, ax = plt.subplots(figsize=(6, 4))
        if train:
            ax.plot([h["step"] for h in train], [h["loss"] for h in train], label="train (label-smoothed)")
        if evals:
            ax.plot([h["step"] for h in evals], [h["eval_loss"] for h in evals], "o-",
                    label="validation (label-smoothed)")
        nll = [h for h in evals if "eval_nll" in h]
        if nll:
            ax.plot([h["step"] for h in nll], [h["eval_nll"] for h in nll], "s--", label="validation NLL")
        ax.set_xlabel("update")
        ax.set_ylabel("loss per target token")
        ax.set_title("Loss")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "loss.png", dpi=100)
        plt.close(fig)
        written["loss"] = str(out_dir / "loss.png")
    lr = [h for h in history if "learning_rate" in h]
    if lr:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([h["step"] for h in lr], [h["learning_rate"] for h in lr])
        ax.set_xlabel("update")
        ax.set_ylabel("learning rate")
        ax.set_title("Learning rate (Section 5.3)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "learning_rate.png", dpi=100)
        plt.close(fig)
        written["learning_rate"] = str(out_dir / "learning_rate.png")
    if bleu:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        axes[0].plot([h["step"] for h in bleu], [h["eval_bleu"] for h in bleu], "o-")
        axes[0].set_xlabel("update")
        axes[1].plot([h.get("time_s", 0) / 60 for h in bleu], [h["eval_bleu"] for h in bleu], "o-")
        axes[1].set_xlabel("wall-clock minutes")
        for ax in axes:
            ax.set_ylabel("validation BLEU")
            ax.grid(alpha=0.3)
        fig.suptitle("Validation BLEU")
        fig.tight_layout()
        fig.savefig(out_dir / "bleu.png", dpi=100)
        plt.close(fig)
        written["bleu"] = str(out_dir / "bleu.png")
    return written


def card_inputs_from_recipe(metrics: Mapping[str, Any], recipe: Mapping[str, Any] | None,
                            signatures: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """(scores, training_info) for `vaswani_hf.hub.write_model_card`: only real test scores, named by what they are
    (`bleu_tok_none` for pre-tokenized references, else sacreBLEU) with the signatures of the computation that made
    them, and the facts of the run."""
    r = dict(recipe or {})
    scores = {}
    bleu_name = "bleu_tok_none" if r.get("bleu_tokenize") == "none" else "sacrebleu"
    for key, name, metric in (("test/bleu", bleu_name, "bleu"), ("test/chrf", "chrf", "chrf")):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            scores[name] = {"score": float(v), "signature": (signatures or {}).get(metric)}
    info: dict[str, Any] = {"source_lang": r.get("src_lang", "en"), "target_lang": r.get("tgt_lang", "de")}
    if scores:
        if r.get("data_format") == "hub":
            info["eval_dataset"] = {"name": f"{r.get('hub_dataset')} {r.get('test_data')}",
                                    "id": r.get("hub_dataset"), "config": r.get("hub_config"),
                                    "split": r.get("test_data")}
        elif r.get("data_format") == "sample":
            info["eval_dataset"] = {"name": f"vaswani_hf bundled sample corpus, {r.get('test_data')} split"}
        else:
            where = "/".join(Path(str(r.get("data_dir") or "")).parts[-2:])  # e.g. multi30k/tok
            info["eval_dataset"] = {"name": f"{where + '/' if where else ''}{r.get('test_data')}"}
    facts = {
        "dataset_name": r.get("hub_dataset") or r.get("data_dir") or r.get("data_format"),
        "steps": metrics.get("global_step"),
        "tokens_per_batch": metrics.get("tokens_per_update"),
        "optimizer": f"Adam(beta1={r.get('adam_beta1')}, beta2={r.get('adam_beta2')}, eps={r.get('adam_epsilon')})",
        "lr_schedule": "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (Section 5.3)"
                       + (f" x {r.get('lr_multiplier')}" if r.get("lr_multiplier", 1.0) != 1.0 else ""),
        "warmup_steps": r.get("warmup_steps"),
        "dropout": r.get("dropout"),
        "label_smoothing": r.get("label_smoothing"),
        "checkpoint_averaging": (f"last {len(metrics['averaged_checkpoints'])} checkpoints"
                                 if metrics.get("averaged_checkpoints") else "none"),
        "training_time": (f"{metrics['train_seconds'] / 60:.1f} min on {metrics.get('world_size', 1)} process(es)"
                          if metrics.get("train_seconds") else None),
        "seed": r.get("seed"),
    }
    info.update({k: v for k, v in facts.items() if v is not None})
    return scores, info


def export_hub_folder(model, tokenizer, out_dir: str | os.PathLike, metrics: Mapping[str, Any] | None = None, *,
                      recipe: Mapping[str, Any] | None = None, history: Sequence[dict] | None = None,
                      signatures: Mapping[str, str] | None = None, overwrite: bool = True) -> Path:
    """Write a Hub-ready folder: `vaswani_hf.hub.save_hub_folder` (weights, config with auto_map, code, tokenizer,
    the paper's generation config, translation pipeline, endpoint handler, model card with the run's real test
    scores) plus `training_metrics.json`, `recipe.yaml` and the PNG plots. The folder appears whole (written beside,
    then renamed). `overwrite`: the folder may replace an earlier export of this run."""
    from ..hub import save_hub_folder

    metrics = dict(metrics or {})
    scores, info = card_inputs_from_recipe(metrics, recipe, signatures)
    extra = {"training_metrics.json": json.dumps(metrics, indent=2, default=_json_default)}
    if recipe is not None:
        extra["recipe.yaml"] = recipe_yaml(recipe)
    return save_hub_folder(model, tokenizer, out_dir, scores=scores, training_info=info, extra_files=extra,
                           write_extra=(lambda folder: plot_history(history, folder)) if history else None,
                           overwrite=overwrite)
