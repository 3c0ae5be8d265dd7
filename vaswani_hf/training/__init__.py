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
