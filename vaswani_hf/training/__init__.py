"""Training the Transformer with the paper's recipe on transformers' `Seq2SeqTrainer` and Accelerate.

- `recipe`: every setting as dataclasses with help text (YAML recipes + command line through `HfArgumentParser`);
- `preflight`: what is checked before any work or write (values, data paths, output folder, corpus files);
- `schedule`: Section 5.3's Adam and learning-rate formula;
- `trainer`: `VaswaniTrainer` (token batches, the label-smoothed objective, evaluation across processes, atomic
  checkpoints);
- `checkpoints`: time-interval checkpoints, resume, averaging (Section 6.1);
- `callbacks`: batch order per epoch, history, batch statistics;
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
from .preflight import check_corpora, check_output_dir, resolve_dir, resolve_path, validate_recipe
from .recipe import (
    SECTIONS,
    Recipe,
    RecipeError,
    defaults,
    format_keys,
    list_recipes,
    load_recipe,
    parse_command_line,
    recipe_path,
    value_from_text,
)
from .report import export_hub_folder, plot_history, write_json
from .run import build_training_arguments, run_training
from .schedule import (
    get_paper_schedule,
    paper_learning_rate,
    paper_lr_lambda,
    paper_optimizer_cls_and_kwargs,
    with_fused_adam,
)
from .objective import LabelSmoothedLoss, label_smoothed_nll
from .trainer import VaswaniTrainer

__all__ = [
    "Recipe", "RecipeError", "SECTIONS", "defaults", "format_keys", "load_recipe", "parse_command_line",
    "recipe_path", "list_recipes", "value_from_text", "validate_recipe", "check_corpora", "check_output_dir",
    "resolve_path", "resolve_dir", "paper_learning_rate", "paper_lr_lambda", "get_paper_schedule",
    "paper_optimizer_cls_and_kwargs", "with_fused_adam", "VaswaniTrainer", "LabelSmoothedLoss", "label_smoothed_nll", "WallClockCallback",
    "SamplerEpochCallback", "HistoryCallback", "BatchStatsCollator", "read_history", "average_checkpoints",
    "last_checkpoints", "resumable_checkpoint", "load_averaged_weights", "save_averaged_checkpoint", "plot_history",
    "write_json", "export_hub_folder", "build_training_arguments", "run_training",
]
