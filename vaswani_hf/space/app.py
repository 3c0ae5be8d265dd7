"""A Hugging Face Space (Gradio): translate with the original Transformer and look at its attention.

The model is --model, else $VASWANI_MODEL, else the first entry of `models:` in this folder's README.md, else
outputs/multi30k-en-de-space/hub (python scripts/train.py --recipe multi30k-en-de-space), else outputs/default/hub.
Locally: vaswani-space --model FOLDER, or python -m vaswani_hf.space --model FOLDER. The page itself is
vaswani_hf.space.page; this file, copied to the Space as its app.py by vaswani_hf.space.push, only starts it.
"""

import sys

from vaswani_hf.space.page import main, model_from_readme

if __name__ == "__main__":
    sys.exit(main(default_model=model_from_readme(__file__)))
