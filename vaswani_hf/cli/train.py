"""Train the Transformer (Vaswani et al., 2017) with a recipe.

    vaswani-train                                          # the `default` recipe: tiny model, sample corpus
    vaswani-train --recipe multi30k-en-de --max_train_minutes 120
    vaswani-train --recipe recipes/my.yaml --dropout 0.2 --output_dir outputs/x
    vaswani-train --recipe wmt14-en-de-base --resume                   # continue from the newest complete checkpoint
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml scripts/train.py --recipe wmt14-en-de-base
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 scripts/train.py   # 2 CPU processes (gloo)

Every recipe key can be overridden with `--key value` (lists as several values or in YAML syntax:
`--translate_examples '["a", "b"]'`, null with `--key null`). `--list-keys` prints all keys with their types,
defaults and meaning; `--list-recipes` the bundled recipes; `--check` validates the recipe, the output folder and
every line of the corpus files, then exits. A folder that holds a previous run is continued with `--resume` or
replaced with `--overwrite`; otherwise it is refused. Bad input is reported in one line (exit 2) before anything is
loaded, trained or written.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..io import run_cli


def build_parser():
    """The command line: the recipe keys (vaswani_hf.training.recipe) and the command's own options."""
    from ..training.recipe import RecipeParser

    return RecipeParser()


def _main(argv: Sequence[str]) -> int:
    from ..training.preflight import check_corpora, check_output_dir, validate_recipe
    from ..training.recipe import format_keys, list_recipes, parse_command_line

    recipe, options = parse_command_line(argv)
    if options.list_keys:
        print(format_keys())
        return 0
    if options.list_recipes:
        print("\n".join(list_recipes()))
        return 0
    validate_recipe(recipe)
    resume_from = check_output_dir(recipe, overwrite=options.overwrite)
    if options.check:
        counts = check_corpora(recipe)
        corpus = ", ".join(f"{k}: {n:,} pairs ({u:,} usable)" for k, (n, u) in counts.items())
        start = f"resume from {resume_from.name}" if resume_from else "start from scratch"
        print(f"recipe {recipe.name} OK; output_dir {recipe.output_dir}: {start}" + (f"; {corpus}" if corpus else ""))
        return 0
    from ..training.run import run_training

    run_training(recipe, overwrite=options.overwrite)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
