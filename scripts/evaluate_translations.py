#!/usr/bin/env python
"""Score translations, or translate a source file with a model and score it (vaswani-evaluate).
See `vaswani_hf/cli/evaluate.py` or --help."""

import sys

from vaswani_hf.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
