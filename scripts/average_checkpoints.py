#!/usr/bin/env python
"""Average the last N checkpoints of a run (vaswani-average-checkpoints). See `vaswani_hf/cli/average_checkpoints.py` or --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import average_checkpoints as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
