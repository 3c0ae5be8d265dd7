#!/usr/bin/env python
"""Score translations, or translate a source file with a model and score it (vaswani-evaluate).
See `vaswani_hf/cli/evaluate.py` or --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import evaluate as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
