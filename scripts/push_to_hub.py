#!/usr/bin/env python
"""Upload a model folder to the Hugging Face Hub in one commit (vaswani-push-to-hub; see --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner and package

from vaswani_commands import push_to_hub as main  # noqa: E402 - after the path

if __name__ == "__main__":
    sys.exit(main())
