#!/usr/bin/env python
"""Train the Transformer (Vaswani et al., 2017) with a recipe.

    python scripts/train.py                                   # the `default` recipe: tiny model, sample corpus
    python scripts/train.py --recipe multi30k-en-de --max_train_minutes 120
    python scripts/train.py --recipe recipes/my.yaml --dropout 0.2 --output_dir outputs/x
    python scripts/train.py --recipe wmt14-en-de-base --resume            # continue from the latest checkpoint
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml scripts/train.py --recipe wmt14-en-de-base
    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 scripts/train.py   # 2 CPU processes (gloo)

Every recipe key can be overridden with `--key value` (lists in YAML syntax: `--translate_examples '["a", "b"]'`,
null with `--key null`). `--list-keys` prints all keys with their types, defaults and meaning; `--list-recipes`
the bundled recipes; `--check` validates the recipe (types, data paths) and exits. Invalid input (unknown key, wrong
type, missing data path) is reported before anything is loaded or trained.
"""

import sys
from pathlib import Path

# `python scripts/train.py` puts scripts/ first on sys.path, where scripts/evaluate.py would shadow the `evaluate`
# library that vaswani_hf.evaluation imports: drop this folder from the path, and make the repository importable
# when the package is not installed.
_SCRIPT_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _SCRIPT_DIR]
sys.path.insert(0, str(_SCRIPT_DIR.parent))


def parse_command_line(argv):
    """`--recipe NAME_OR_PATH`, `--resume`, `--check`, `--list-keys`, `--list-recipes`, then `--key value` pairs.

    Hand-parsed rather than argparse with one option per key: the keys and their types come from the recipe schema
    (`vaswani_hf.training.RECIPE_KEYS`), and an unknown key must list the valid ones.
    """
    from vaswani_hf.training import RECIPE_KEYS, RecipeError, parse_override

    recipe, overrides, flags = "default", {}, set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            flags.add("help")
            i += 1
            continue
        if arg in ("--list-keys", "--list_keys", "--list-recipes", "--list_recipes", "--check"):
            flags.add(arg.lstrip("-").replace("-", "_"))
            i += 1
            continue
        if not arg.startswith("--"):
            raise RecipeError(f"unexpected argument {arg!r}: use --recipe NAME_OR_PATH and --key value pairs")
        name, sep, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if name not in RECIPE_KEYS and name != "recipe":
            valid = ", ".join(sorted(RECIPE_KEYS))
            raise RecipeError(f"unknown option --{name}. Valid recipe keys: {valid}")
        if not sep and name == "resume" and (i + 1 >= len(argv) or argv[i + 1].startswith("--")):
            value = "true"  # bare `--resume`
        elif not sep:
            if i + 1 >= len(argv):
                raise RecipeError(f"--{name} needs a value")
            value = argv[i + 1]
            i += 1
        i += 1
        if name == "recipe":
            recipe = value
        else:
            overrides[name] = parse_override(name, value)
    return recipe, overrides, flags


def main(argv=None):
    from vaswani_hf.training import RECIPE_KEYS, RecipeError, list_recipes, load_recipe, run_training

    argv = sys.argv[1:] if argv is None else argv
    try:
        recipe_name, overrides, flags = parse_command_line(argv)
        if "help" in flags:
            print(__doc__)
            return 0
        if "list_keys" in flags:
            for name, spec in RECIPE_KEYS.items():
                choices = f" one of {list(spec.choices)}" if spec.choices else ""
                print(f"--{name:<28} {spec.type:<10} default {spec.default!r}{choices}\n      {spec.help}")
            return 0
        if "list_recipes" in flags:
            print("\n".join(list_recipes()))
            return 0
        recipe = load_recipe(recipe_name, overrides)
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "check" in flags:
        print(f"recipe {recipe['_recipe_name']} OK")
        return 0
    run_training(recipe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
