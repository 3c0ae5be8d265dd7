"""Write what a training run leaves for people to read: plots, metrics JSON, hypotheses, and the Hub-ready folder,
which is the `vaswani_hf.hub` model folder plus `training_metrics.json`, `recipe.yaml` and the plots.
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
    """Write the decoded translations of an evaluation, one line per sentence in corpus order, replacing the file
    (it is this run's own)."""
    texts = tokenizer.batch_decode(predictions, skip_special_tokens=True)
    write_lines(path, [t.strip() for t in texts], overwrite=True)


def plot_history(history: Sequence[dict], out_dir: str | os.PathLike) -> dict[str, str]:
    """Plot the training loss (and validation loss), the learning rate and validation BLEU, by step and by wall-clock
    time, as PNG files in `out_dir`, and return the path of each file written by its name."""
    import matplotlib  # The backend is chosen before pyplot is imported.

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}

    def rows(key: str) -> list[dict]:
        return [h for h in history if key in h]

    def plot(name: str, title: str, ylabel: str, curves: list[tuple], xlabels=("update",)) -> None:
        """Write one PNG with a panel per x label; each of `curves` is (panel, rows, x key, y key, style, label)."""
        fig, axes = plt.subplots(1, len(xlabels), figsize=(6 if len(xlabels) == 1 else 10, 4), squeeze=False)
        for panel, points, x, y, style, label in curves:
            axes[0][panel].plot([x(h) for h in points], [h[y] for h in points], style, label=label)
        for ax, xlabel in zip(axes[0], xlabels):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        if any(curve[-1] for curve in curves):
            axes[0][0].legend()
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=100)
        plt.close(fig)
        written[name] = str(out_dir / f"{name}.png")

    step, minutes = (lambda h: h["step"]), (lambda h: h.get("time_s", 0) / 60)
    losses = [
        (0, rows("loss"), step, "loss", "-", "train (label-smoothed)"),
        (0, rows("eval_loss"), step, "eval_loss", "o-", "validation (label-smoothed)"),
        (0, rows("eval_nll"), step, "eval_nll", "s--", "validation NLL"),
    ]
    if rows("loss") or rows("eval_loss"):
        plot("loss", "Loss", "loss per target token", [curve for curve in losses if curve[1]])
    if rows("learning_rate"):
        plot(
            "learning_rate",
            "Learning rate (Section 5.3)",
            "learning rate",
            [(0, rows("learning_rate"), step, "learning_rate", "-", None)],
        )
    if rows("eval_bleu"):
        plot(
            "bleu",
            "Validation BLEU",
            "validation BLEU",
            [
                (0, rows("eval_bleu"), step, "eval_bleu", "o-", None),
                (1, rows("eval_bleu"), minutes, "eval_bleu", "o-", None),
            ],
            xlabels=("update", "wall-clock minutes"),
        )
    return written


def card_inputs(
    plan: RunPlan, metrics: Mapping[str, Any], signatures: Mapping[str, str] | None = None
) -> tuple[dict, dict]:
    """Return the scores and the training facts for the model card. The scores are real test scores only, with their
    signatures, named by what they are: `bleu_tok_none` for pre-tokenized references, else `sacrebleu`."""
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
        "dropout": plan.model.config.dropout,
        "label_smoothing": plan.model.label_smoothing,
        "checkpoint_averaging": (
            f"last {len(metrics['averaged_checkpoints'])} checkpoints"
            if metrics.get("averaged_checkpoints")
            else "none"
        ),
        "training_time": (
            f"{metrics['train_seconds'] / 60:.1f} min on {metrics.get('world_size', 1)} process(es)"
            if metrics.get("train_seconds")
            else None
        ),
        "distributed": distributed_strategy(metrics),
        "seed": plan.process.seed,
    }
    info.update({k: v for k, v in facts.items() if v is not None})
    return scores, info


def distributed_strategy(metrics: Mapping[str, Any]) -> str | None:
    """Return how the run was spread over processes (Accelerate's distributed type), as the card states it."""
    kind, processes = metrics.get("distributed_type"), metrics.get("world_size", 1)
    if kind is None:
        return None
    names = {
        "NO": "one process",
        "MULTI_CPU": "DDP over gloo (CPU)",
        "MULTI_GPU": "DDP (GPUs)",
        "FSDP": "FSDP",
        "DEEPSPEED": "DeepSpeed",
    }
    return f"{names.get(kind, kind)}, {processes} process(es)"


def export_hub_folder(
    model,
    tokenizer,
    plan: RunPlan,
    metrics: Mapping[str, Any] | None = None,
    *,
    history: Sequence[dict] | None = None,
    signatures: Mapping[str, str] | None = None,
) -> Path:
    """Write the run's Hub-ready folder, whole: `vaswani_hf.hub.save_hub_folder` plus `training_metrics.json`,
    `recipe.yaml` and the plots. It replaces only this run's own earlier export, which the plan checked."""
    metrics = dict(metrics or {})
    scores, info = card_inputs(plan, metrics, signatures)
    extra = {"training_metrics.json": to_json(metrics), "recipe.yaml": plan.export.recipe_text}
    return save_hub_folder(
        model,
        tokenizer,
        plan.export.export_dir,
        scores=scores,
        training_info=info,
        extra_files=extra,
        overwrite=True,
        own=True,
        write_extra=(lambda folder: plot_history(history, folder)) if history else None,
    )
