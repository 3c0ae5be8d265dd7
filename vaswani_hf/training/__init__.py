"""Train the Transformer with the paper's recipe on transformers' `Seq2SeqTrainer` and Accelerate.

A run goes through four modules in turn. `recipe` holds the settings. `plan` resolves them once, with `sources`,
`budget` and `preflight`. `run` trains, through `trainer` with Section 5.4's `objective` and 5.3's `schedule`, with
`checkpoints` (and Section 6.1's checkpoint averaging) and `callbacks`. `report` writes what the run produced:
hypotheses, plots, the model card and the Hub folder.
"""
