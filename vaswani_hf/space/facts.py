"""Gather what the Space's page says before it translates: what the model is, and the sentences it offers.

`read_facts` reads the model's title, language pair, size and BLEU from its card (README.md) and config, never where
it is stored. `EXAMPLES` are the sentences the page offers as buttons: the paper's attention figures (Figures 3-5,
encoder self-attention in layer 5), each with the view it opens, and two image captions of Multi30k's kind. Each
example names the domain of its text, so that `example_label` can say when it lies outside the domain of the model's
training data (`model_domain`, read from the card). `vaswani_hf.space.logic` imports these names again, so that the
page's testable parts are all reachable from that one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..hub.card import LANGUAGE_NAMES, count_parameters

ALL_HEADS = "all"  # The head of a view that means every head of the layer, in the examples, the page and the API.


def language_name(code: str | None) -> str:
    """Return the English name of a language code ("German" for "de"), or the code itself if the table lacks it.

    A missing code gives "an unknown language".
    """
    return LANGUAGE_NAMES.get(code, code) if code else "an unknown language"


@dataclass
class ModelFacts:
    """Hold what the page says the model is, read from its card (README.md) and config, never where it is stored."""

    title: str
    source_lang: str | None = None
    target_lang: str | None = None
    parameters: int = 0
    bleu: str | None = None  # For example "27.3 sacreBLEU on newstest2014", as the card's model-index declares it.
    card_url: str | None = None  # The card's address on the Hub, for a Hub id.
    card_text: str | None = None  # The card's text, for a model folder; the page shows it.
    datasets: list = field(default_factory=list)  # The card's training data, as names or Hub ids.


def read_facts(name_or_path: str, model) -> ModelFacts:
    """Return the model's title, language pair, size and BLEU, read from its card and config.

    For a Hub id the facts also link to its card.
    """
    from huggingface_hub import ModelCard

    folder = Path(name_or_path)
    hub_id = None if folder.exists() else str(name_or_path)
    try:
        card = ModelCard.load(folder / "README.md" if hub_id is None else hub_id)
    except Exception:  # noqa: BLE001 - without a readable card, the page says what the config says.
        card = None
    data = card.data if card is not None else None
    langs = getattr(data, "language", None) or getattr(model.config, "langs", None) or [None, None]
    langs = ([langs] if isinstance(langs, str) else list(langs)) + [None, None]  # The card may give only one language.
    bleu = next((r for r in (getattr(data, "eval_results", None) or []) if "bleu" in r.metric_type.lower()), None)
    title = getattr(data, "model_name", None) or hub_id or folder.resolve().name
    bleu = f"{bleu.metric_value:g} {bleu.metric_name or 'BLEU'} on {bleu.dataset_name}" if bleu else None
    return ModelFacts(
        title=str(title),
        source_lang=langs[0],
        target_lang=langs[1],
        bleu=bleu,
        parameters=count_parameters(model),
        card_url=f"https://huggingface.co/{hub_id}" if hub_id else None,
        card_text=card.text if card is not None and hub_id is None else None,
        datasets=[str(d) for d in _as_list(getattr(data, "datasets", None))],
    )


def _as_list(value) -> list:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


LAST = "last"  # An example's layer meaning the model's last, whatever its depth.


@dataclass(frozen=True)
class Example:
    """Hold a sentence the page offers, the view it opens and the domain of its text.

    The view names the kind, the 1-based layer or LAST, the head and the token to follow. The domain lets the page
    say when the sentence lies outside the model's.
    """

    text: str
    view: dict | None
    label: str
    domain: str


NEWS, CAPTIONS = "news", "image captions"
# The training data whose domain the page can name, found when a card's `datasets` entry (or title) contains the key.
DATA_DOMAINS = {"multi30k": CAPTIONS, "flickr": CAPTIONS, "wmt": NEWS, "newstest": NEWS, "europarl": NEWS}

# The paper's attention figures (Figures 3-5, encoder self-attention in layer 5 of 6), each with the view it shows,
# and two image captions of Multi30k's kind, which is the domain of the Space's model.
EXAMPLES = [
    Example(
        "It is in this spirit that a majority of American governments have passed new laws since 2009 making the "
        "registration or voting process more difficult.",
        {"kind": "encoder", "layer": 5, "head": ALL_HEADS, "token": "making"},
        'Figure 3: the long-distance dependency of "making ... more difficult" (encoder self-attention, layer 5)',
        NEWS,
    ),
    Example(
        "The Law will never be perfect, but its application should be just - this is what we are missing, in my "
        "opinion.",
        {"kind": "encoder", "layer": 5, "head": ALL_HEADS, "token": "its"},
        'Figures 4-5: the anaphora of "its" (encoder self-attention, layer 5)',
        NEWS,
    ),
    Example(
        "A man is riding a horse on the beach.",
        {"kind": "cross", "layer": LAST, "head": ALL_HEADS, "token": None},
        "Encoder-decoder attention: which source words each target word reads (last layer)",
        CAPTIONS,
    ),
    Example("Two young children are playing in the snow with their dog.", None, "An image caption", CAPTIONS),
]


def model_domain(facts: ModelFacts) -> str | None:
    """Return the domain of the model's data, named by its card's datasets, title or test set, or None if unknown.

    The domains are those of `DATA_DOMAINS`.
    """
    named = " ".join([*facts.datasets, facts.title, facts.bleu or ""]).lower()
    return next((domain for key, domain in DATA_DOMAINS.items() if key in named), None)


def example_label(example: Example, facts: ModelFacts) -> str:
    """Return the example's label, marked when its text lies outside the domain of the model's training data."""
    domain = model_domain(facts)
    if domain is None or domain == example.domain:
        return example.label
    return (
        f"{example.label}. A {example.domain} sentence, outside this model's domain ({domain}): expect a rough "
        "translation"
    )
