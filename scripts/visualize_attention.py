#!/usr/bin/env python
"""Plot attention heads and diagnostics for one sentence (vaswani-visualize-attention; see --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import visualize_attention as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
