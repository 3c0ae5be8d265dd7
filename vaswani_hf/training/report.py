"""Report what a training run produced: the final scores of the (averaged) model on the dev and test sets with their
hypotheses, the example translations, the plots, metrics.json, and the Hub-ready folder, which is the
`vaswani_hf.hub` model folder plus `training_metrics.json`, `recipe.yaml` and the plots.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import io
from ..hub import save_hub_folder
from ..io import to_json, write_lines
from ..settings import GENERATION_SETTINGS
from ..translation.inference import translate
from .callbacks import read_history
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
    recipe, opt = plan.recipe, plan.recipe.optimization
    scores = {}
    bleu_name = "bleu_tok_none" if recipe.evaluation.bleu_tokenize == "none" else "sacrebleu"
    for key, name, metric in (("test/bleu", bleu_name, "bleu"), ("test/chrf", "chrf", "chrf")):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            scores[name] = {"score": float(v), "signature": (signatures or {}).get(metric)}
    info: dict[str, Any] = {"source_lang": recipe.data.src_lang, "target_lang": recipe.data.tgt_lang}
    if scores and plan.sources.get("test") is not None:
        info["eval_dataset"] = plan.sources["test"].describe()
    facts = {
        "dataset_name": str(recipe.data.hub_dataset or recipe.data.data_dir or recipe.data.data_format),
        "steps": metrics.get("global_step"),
        "tokens_per_batch": metrics.get("tokens_per_update"),
        "optimizer": f"Adam(beta1={opt.adam_beta1}, beta2={opt.adam_beta2}, eps={opt.adam_epsilon})",
        "lr_schedule": "d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (Section 5.3)"
        + (f" x {opt.lr_multiplier}" if opt.lr_multiplier != 1.0 else ""),
        "warmup_steps": opt.warmup_steps,
        "dropout": recipe.model.dropout,
        "label_smoothing": opt.label_smoothing,
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
        "seed": recipe.run.seed,
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
    extra = {"training_metrics.json": to_json(metrics), "recipe.yaml": plan.recipe.to_yaml()}
    return save_hub_folder(
        model,
        tokenizer,
        plan.export_folder,
        scores=scores,
        training_info=info,
        extra_files=extra,
        overwrite=True,
        own=True,
        write_extra=(lambda folder: plot_history(history, folder)) if history else None,
    )


def final_num_beams(plan: RunPlan) -> int:
    """Return the beam size of the final scores and example translations: test_num_beams, or else the exported
    generation_config.json's (the paper's 4)."""
    return plan.recipe.evaluation.test_num_beams or GENERATION_SETTINGS["num_beams"].default


def final_scores(trainer, plan: RunPlan, data, state) -> dict[str, Any]:
    """Return the validation and test scores of the final model with the final beam size, and write its hypotheses
    in corpus order."""
    num_beams = final_num_beams(plan)
    metrics: dict[str, Any] = {"final_num_beams": num_beams}
    for split, dataset in (("valid", data.valid), ("test", data.test)):
        if dataset is None:
            continue
        prediction = trainer.predict(dataset, metric_key_prefix=split, num_beams=num_beams)
        metrics.update({k.replace(f"{split}_", f"{split}/", 1): v for k, v in prediction.metrics.items()})
        if state.is_main_process and prediction.predictions is not None:
            write_hypotheses(plan.output_dir / f"{split}_hypotheses.txt", data.tokenizer, prediction.predictions)
    return metrics


SUMMARY = (
    "first_logged_loss",
    "last_logged_loss",
    "valid/loss",
    "valid/nll",
    "valid/bleu",
    "test/loss",
    "test/bleu",
    "train_tgt_tokens_per_second",
    "padding_share_tgt",
)  # The metrics the run's last log line shows.


def finish(trainer, plan: RunPlan, data, metrics: dict[str, Any]) -> None:
    """Write, on the main process, the example translations, plots, metrics.json and the Hub-ready folder."""
    examples, out = list(plan.recipe.run.translate_examples), plan.output_dir
    model = trainer.accelerator.unwrap_model(trainer.model)
    if examples:
        outputs = translate(
            model,
            data.tokenizer,
            examples,
            num_beams=final_num_beams(plan),
            device=trainer.args.device,
            progress=False,
        )
        metrics["examples"] = [{"source": s, "translation": t} for s, t in zip(examples, outputs)]
        print("\nTranslations:")
        for s, t in zip(examples, outputs):
            print(f"  {s}\n    -> {t}")
    history = read_history(out / "history.jsonl") or trainer.state.log_history
    metrics["plots"] = plot_history(history, out)
    signatures = getattr(trainer.compute_metrics, "signatures", None)
    export_hub_folder(model, data.tokenizer, plan, metrics, history=history, signatures=signatures)
    metrics["export_dir"] = str(plan.export_folder)
    io.write_json(out / "metrics.json", metrics)
    summary = {k: metrics[k] for k in SUMMARY if k in metrics}
    logger.info("done: %s", json.dumps(summary, default=str))
    logger.info("model folder: %s | metrics: %s", plan.export_folder, out / "metrics.json")
