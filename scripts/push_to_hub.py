#!/usr/bin/env python
"""Upload a model folder to the Hugging Face Hub in one commit (vaswani-push-to-hub; see --help)."""

import sys

from vaswani_hf.cli.push_to_hub import main

if __name__ == "__main__":
    sys.exit(main())
