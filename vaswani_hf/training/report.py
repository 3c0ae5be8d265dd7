"""What a training run leaves for people to read: plots, metrics JSON, hypotheses, and the Hub-ready folder.

The folder export is `vaswani_hf.hub`'s model folder (weights, code, tokenizer, pipeline, handler, card) plus the
run's own files: `training_metrics.json` (everything measured), `recipe.yaml`, the PNG plots.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..hub import save_hub_folder
from ..io import to_json, write_lines
from .plan import RunPlan

logger = logging.getLogger(__name__)


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


def card_inputs(plan: RunPlan, metrics: Mapping[str, Any], signatures: Mapping[str, str] | None = None
                ) -> tuple[dict, dict]:
    """(scores, training_info) for `vaswani_hf.hub.write_model_card`: only real test scores, named by what they are
    (`bleu_tok_none` for pre-tokenized references, else sacreBLEU) with the signatures of the computation that made
    them, and the facts of the run."""
    data, optimizer, schedule = plan.data, plan.optimizer, plan.schedule
    scores = {}
    bleu_name = "bleu_tok_none" if plan.evaluation.bleu_tokenize == "none" else "sacrebleu"
    for key, name, metric in (("test/bleu", bleu_name, "bleu"), ("test/chrf", "chrf", "chrf")):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            scores[name] = {"score": float(v), "signature": (signatures or {}).get(metric)}
    info: dict[str, Any] = {"source_lang": data.src_lang, "target_lang": data.tgt_lang}
    if scores and plan.data.sources.get("test") is not None:
        info["eval_dataset"] = plan.data.sources["test"].describe()
    facts = {
        "dataset_name": plan.export.dataset_name,
        "steps": metrics.get("global_step"),
        "tokens_per_batch": metrics.get("tokens_per_update"),
        "optimizer": f"Adam(beta1={optimizer.betas[0]}, beta2={optimizer.betas[1]}, eps={optimizer.eps})",
        "lr_schedule": "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (Section 5.3)"
                       + (f" x {schedule.lr_multiplier}" if schedule.lr_multiplier != 1.0 else ""),
        "warmup_steps": schedule.warmup_steps,
        "dropout": plan.model.settings["dropout"],
        "label_smoothing": plan.model.label_smoothing,
        "checkpoint_averaging": (f"last {len(metrics['averaged_checkpoints'])} checkpoints"
                                 if metrics.get("averaged_checkpoints") else "none"),
        "training_time": (f"{metrics['train_seconds'] / 60:.1f} min on {metrics.get('world_size', 1)} process(es)"
                          if metrics.get("train_seconds") else None),
        "distributed": distributed_strategy(metrics),
        "seed": plan.process.seed,
    }
    info.update({k: v for k, v in facts.items() if v is not None})
    return scores, info


def distributed_strategy(metrics: Mapping[str, Any]) -> str | None:
    """How the run was spread over processes, as the card states it (Accelerate's distributed type)."""
    kind, processes = metrics.get("distributed_type"), metrics.get("world_size", 1)
    if kind is None:
        return None
    names = {"NO": "one process", "MULTI_CPU": "DDP over gloo (CPU)", "MULTI_GPU": "DDP (GPUs)", "FSDP": "FSDP",
             "DEEPSPEED": "DeepSpeed"}
    return f"{names.get(kind, kind)}, {processes} process(es)"


def export_hub_folder(model, tokenizer, plan: RunPlan, metrics: Mapping[str, Any] | None = None, *,
                      history: Sequence[dict] | None = None, signatures: Mapping[str, str] | None = None) -> Path:
    """Write the run's Hub-ready folder (`plan.export.export_dir`): `vaswani_hf.hub.save_hub_folder` (weights, config
    with auto_map, code, tokenizer, the paper's generation config, translation pipeline, endpoint handler, model card
    with the run's real test scores) plus `training_metrics.json`, `recipe.yaml` and the PNG plots. The folder appears
    whole (written beside, then renamed); it replaces only this run's own earlier export (the plan checked it)."""
    metrics = dict(metrics or {})
    scores, info = card_inputs(plan, metrics, signatures)
    extra = {"training_metrics.json": to_json(metrics), "recipe.yaml": plan.export.recipe_text}
    return save_hub_folder(model, tokenizer, plan.export.export_dir, scores=scores, training_info=info,
                           extra_files=extra, overwrite=True, own=True,
                           write_extra=(lambda folder: plot_history(history, folder)) if history else None)
