#!/usr/bin/env python
"""Translate a text file with a saved model folder (vaswani-translate). See `vaswani_hf/cli/translate.py` or --help."""

import sys

from vaswani_hf.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
