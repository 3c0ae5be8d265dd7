"""Train the Transformer with the paper's recipe on transformers' `Seq2SeqTrainer` and Accelerate.

A run goes through six stations, one module each, in this order; `run` is the line that calls them. `recipe` reads
the recipe: every key, in typed sections, the model's section being the `VaswaniConfig` the run trains. `plan`
decides what the recipe means on this machine (processes, precision, token budgets), with `preflight` deciding what
happens to the output folder. `data` prepares Section 5.1's corpora and shared BPE. `trainer` builds the model and
trains it, with Sections 5.3-5.4's `objective` (the label-smoothed loss, Adam and the learning rate) and the
`callbacks` that follow the run. `checkpoints` writes checkpoints at time intervals and averages the last ones
(Section 6.1). `report` scores the averaged model and writes what the run produced: hypotheses, plots,
metrics.json, the model card and the Hub folder.
"""
