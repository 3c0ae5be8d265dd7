#!/usr/bin/env python
"""Plot attention heads and diagnostics for one sentence (vaswani-visualize-attention; see --help)."""

import sys

from vaswani_hf.cli.visualize_attention import main

if __name__ == "__main__":
    sys.exit(main())
