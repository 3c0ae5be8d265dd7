"""`python -m vaswani_hf.space`: serve the Space's page (vaswani_hf.space.page)."""

import sys

from .page import main

if __name__ == "__main__":
    sys.exit(main())
