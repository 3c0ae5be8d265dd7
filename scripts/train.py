#!/usr/bin/env python
"""Train the Transformer with a recipe (vaswani-train). See `vaswani_hf/cli/train.py` or --help."""

import sys

from vaswani_hf.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
