#!/usr/bin/env python
"""Average the last N checkpoints of a run (vaswani-average-checkpoints). See `vaswani_hf/cli/average_checkpoints.py` or --help."""

import sys

from vaswani_hf.cli.average_checkpoints import main

if __name__ == "__main__":
    sys.exit(main())
