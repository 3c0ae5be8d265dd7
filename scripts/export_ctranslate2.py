#!/usr/bin/env python
"""Export a model folder to CTranslate2 (vaswani-export-ctranslate2; see --help)."""

import sys

from vaswani_hf.cli.export_ctranslate2 import main

if __name__ == "__main__":
    sys.exit(main())
