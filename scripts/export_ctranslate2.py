#!/usr/bin/env python
"""Export a model folder to CTranslate2 (vaswani-export-ctranslate2; see --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import export_ctranslate2 as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
