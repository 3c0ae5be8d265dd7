#!/usr/bin/env python
"""Train the shared source+target BPE tokenizer (vaswani-train-tokenizer). See `vaswani_hf/cli/train_tokenizer.py` or --help."""

import sys

from vaswani_hf.cli.train_tokenizer import main

if __name__ == "__main__":
    sys.exit(main())
