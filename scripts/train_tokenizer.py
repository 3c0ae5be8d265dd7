#!/usr/bin/env python
"""Train the shared source+target BPE tokenizer (vaswani-train-tokenizer). See `vaswani_hf/cli/train_tokenizer.py` or --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import train_tokenizer as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
