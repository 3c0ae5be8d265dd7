#!/usr/bin/env python
"""Translate a text file with a saved model folder (vaswani-translate). See `vaswani_hf/cli/translate.py` or --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import translate as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
