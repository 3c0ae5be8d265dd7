"""Training the Transformer with the paper's recipe on transformers' `Seq2SeqTrainer` and Accelerate.

- `recipe`: every setting as dataclasses with help text and constraints, checked when a recipe is built
  (`load_recipe`: YAML recipes + overrides);
- `plan`: what a recipe means on this machine, resolved once before any work: data `sources`, the token `budget`,
  the output folder (`preflight`: resume, overwrite, finished, locked), device checks;
- `objective`: Section 5.4's label-smoothed cross-entropy; `schedule`: Section 5.3's Adam and learning rate;
- `trainer`: `VaswaniTrainer` (token batches, the objective, evaluation across processes, atomic checkpoints);
- `checkpoints`: time-interval checkpoints, resume, averaging (Section 6.1); `callbacks`: batch order per epoch,
  history, batch statistics, the run clock;
- `run`: a run end to end; `report`: plots, metrics, hypotheses and the Hub-ready folder.
"""

from .callbacks import BatchStatsCollator, HistoryCallback, SamplerEpochCallback, read_history
from .checkpoints import (
    WallClockCallback,
    average_checkpoints,
    last_checkpoints,
    load_averaged_weights,
    resumable_checkpoint,
    save_averaged_checkpoint,
)
from .objective import LabelSmoothedLoss, label_smoothed_nll
from .plan import RunPlan, World, plan_run
from .recipe import (
    SECTIONS,
    Recipe,
    RecipeError,
    defaults,
    format_keys,
    list_recipes,
    load_recipe,
    recipe_path,
    value_from_text,
)
from .report import export_hub_folder, plot_history
from .run import build_training_arguments, run_training
from .schedule import (
    get_paper_schedule,
    paper_learning_rate,
    paper_lr_lambda,
    paper_optimizer_cls_and_kwargs,
    with_fused_adam,
)
from .sources import resolve_dir, resolve_path, split_sources
from .trainer import VaswaniTrainer

__all__ = [
    "Recipe", "RecipeError", "SECTIONS", "defaults", "format_keys", "load_recipe", "recipe_path", "list_recipes",
    "value_from_text",
    "RunPlan", "World", "plan_run", "split_sources", "resolve_path", "resolve_dir",
    "paper_learning_rate", "paper_lr_lambda", "get_paper_schedule", "paper_optimizer_cls_and_kwargs",
    "with_fused_adam", "VaswaniTrainer", "LabelSmoothedLoss", "label_smoothed_nll", "WallClockCallback",
    "SamplerEpochCallback", "HistoryCallback", "BatchStatsCollator", "read_history", "average_checkpoints",
    "last_checkpoints", "resumable_checkpoint", "load_averaged_weights", "save_averaged_checkpoint", "plot_history",
    "export_hub_folder", "build_training_arguments", "run_training",
]
