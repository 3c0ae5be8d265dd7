"""The Space: a Gradio page to translate with a model and look at every attention weight, locally or on the Hub.

The wing reads in the order a request goes:

- `page` builds the Gradio page and serves it (`vaswani-space`, `python -m vaswani_hf.space`);
- `logic` answers the page's requests without Gradio: translate, collect the attention, check the values;
- `facts` says what the model is, from its card and config (its languages, its domain, its size);
- `payload` packs the weights the page draws, one byte a weight, within a bound on what a translation sends;
- `view.js` and `view.css` draw them in the browser;
- `push` writes the Space's files (`app.py`, beside this file, its README and requirements) and uploads them.

`from vaswani_hf.space import main` (and the page's other names) keeps working: a name this package does not define
is looked up in `page`, which is imported only then, so that importing `logic` or `push` does not import Gradio.
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    """Look up a name of the page module (`main`, `build_demo`, `resolve_model`, ...), as `vaswani_hf.space` was that
    module before the Space became a folder (PEP 562)."""
    if name.startswith("__"):
        raise AttributeError(name)
    page = importlib.import_module(".page", __name__)
    try:
        return getattr(page, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
