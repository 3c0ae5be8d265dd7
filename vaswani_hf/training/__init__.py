"""Training the Transformer with the paper's recipe on transformers' `Seq2SeqTrainer` and Accelerate: `recipe` (the
settings) -> `plan` (resolved once: `sources`, `budget`, `preflight`) -> `run` (`trainer` with Section 5.4's
`objective` and 5.3's `schedule`, `checkpoints` and averaging of 6.1, `callbacks`) -> `report`.
"""
