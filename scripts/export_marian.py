#!/usr/bin/env python
"""Write a native MarianMTModel folder from a model folder (vaswani-export-marian; see --help)."""

import sys

from vaswani_hf.cli.export_marian import main

if __name__ == "__main__":
    sys.exit(main())
