"""Pack the attention weights the Space's page draws, so that what a translation sends the page is bounded.

The weights are Section 3.2.3's softmax(QK^T/sqrt(d_k)) of every kind, layer and head. The packing bounds what a
translation sends by design, whatever the model's size or the sentence's length.

* Codes. The server keeps a weight w in [0, 1] as 16 bits, c = round(65535 w), with an error of at most 1/131070;
  downloads and the API's 16-bit packed form get this. It travels to the page as one byte, c = round(255 sqrt(w)),
  read back as (c / 255)^2. The error is then at most sqrt(w) / 255 + 1/260100 + 1/131070, which is 0.0004 below
  w = 0.01 (so the many small weights of a long sentence keep their third decimal) and 0.004 at w = 1.
* Blocks. The unit the page receives is a block. A block is one head's map in one layer ("encoder:2:5", with
  0-based layer and head), or a kind's thumbnails for the model view ("encoder:thumbs"), in which every layer and
  head is max-pooled to at most `THUMB` x `THUMB` cells, so that a sharp pattern of a long sentence stays visible.
* Payload. A translation's payload carries the blocks its first view needs, then the same layer of the other two
  kinds (so that a change of kind asks the server nothing), then the model view's thumbnails, then the other heads
  nearest to that view, until `PAGE_BUDGET` characters are used. A block that does not fit is skipped and a smaller
  later one may still be sent. A short sentence on a small model fits whole, and a change of view then asks the
  server nothing. At the page's longest sentence on the base model (200 source and 250 target tokens, 6 layers of 8
  heads) the three kinds' layers take 1.63 million characters, more than the budget: the view's layer and the next
  kind's are sent whole and the third kind's in part (six of its eight heads), and the thumbnails then come with
  the page's first prefetch (view.js's `prefetch`, after the visitor's first change of view). The page asks for a missing block when a view first
  needs it, through the viewer's server function (`PageWeights.blocks`), which is no endpoint of the API.
* Cache. The server keeps the weights of its last `CACHE_TRANSLATIONS` translations (16 bits, at most `CACHE_BYTES`)
  for those requests. An older translation's weights are gone, and the page then says to translate again.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from ..settings import settings_of
from ..visualize import KINDS, Attentions
from ..visualize.attention import KIND_TITLES

PAGE_BUDGET = 1_500_000  # Base64 characters of weights per translation, so the page's JSON stays under 2 MB.
THUMB = 48  # A thumbnail's largest side in cells, so 48 x 48 bytes per head; the model view draws 28-72 pixels.
CACHE_TRANSLATIONS = 16  # The number of translations whose weights the server keeps for the page's later requests.
CACHE_BYTES = 256 * 2**20  # The most bytes they may take; a base-size model at 200 tokens takes about 15 MB.
BITS = (8, 16)
CODES = {
    8: "uint8 c: weight (c / 255) ** 2 (within 0.0004 below 0.01, 0.004 at 1)",
    16: "little-endian uint16 c: weight c / 65535 (within 0.000008)",
}


@dataclass
class AttentionAnswer:
    """Declare the form of /attention's weights: numbers to a stated precision, or the page's compact codes."""

    decimals: int = field(
        default=4, metadata={"help": "decimal places of /attention's weights as numbers", "min": 1, "max": 8}
    )
    packed_bits: int = field(
        default=0,
        metadata={
            "help": "0: /attention's weights as numbers; 8 (the page's code) or 16: base64 of one- or two-byte codes",
            "choices": (0, 8, 16),
        },
    )


API_SETTINGS = settings_of(AttentionAnswer)

ERRORS = {8: "sqrt(w) / 255 + 1/260100 + 1/131070", 16: "1/131070"}  # The largest error of a code, as a formula.
THUMBS = "thumbs"


def codes(weights, bits: int) -> bytes:
    """Return `weights` (a tensor or array in [0, 1]) as codes, 8 bits on a square-root scale or 16 bits linear.

    The module docstring gives the codes and their errors.
    """
    w = np.clip(np.asarray(weights, dtype=np.float32), 0, 1)
    if bits == 8:
        return np.rint(np.sqrt(w) * 255).astype(np.uint8).tobytes()
    return np.rint(w * 65535).astype("<u2").tobytes()


def decode(data: str, bits: int) -> np.ndarray:
    """Return the weights that base64 `data` of `codes(..., bits)` stands for, as flat float64, as the page does."""
    raw = base64.b64decode(data)
    if bits == 8:
        return (np.frombuffer(raw, dtype=np.uint8) / 255.0) ** 2
    return np.frombuffer(raw, dtype="<u2") / 65535.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def block_id(kind: str, layer: int | None = None, head: int | None = None) -> str:
    """Return the name of a block: "kind:layer:head" (0-based) for one head's map, "kind:thumbs" for thumbnails."""
    return f"{kind}:{THUMBS}" if layer is None else f"{kind}:{layer}:{head}"


def thumb_shape(queries: int, keys: int) -> tuple[int, int]:
    return min(queries, THUMB), min(keys, THUMB)


@dataclass
class PageWeights:
    """Hold one translation's weights as the server keeps them for the page.

    `weights[kind]` is a (layers, heads, queries, keys) array of 16-bit codes, and `key` is the random name the page
    asks for its blocks by."""

    key: str
    weights: dict

    @classmethod
    def of(cls, attentions: Attentions) -> PageWeights:
        weights = {}
        for kind in KINDS:
            w = attentions.weights(kind).detach().float().cpu()
            weights[kind] = np.frombuffer(codes(w, 16), dtype="<u2").reshape(w.shape)
        return cls(secrets.token_urlsafe(16), weights)

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for w in self.weights.values())

    def block(self, name: str, bits: int = 8) -> str:
        """Return the block `name` (see `block_id`) as base64 of its codes; raise a ValueError naming what is wrong."""
        parts = name.split(":") if isinstance(name, str) else []
        if len(parts) not in (2, 3) or parts[0] not in self.weights:
            raise ValueError(f"no block {str(name)[:60]!r}: blocks are named KIND:LAYER:HEAD or KIND:{THUMBS}")
        weights = self.weights[parts[0]]
        if len(parts) == 2:
            if parts[1] != THUMBS:
                raise ValueError(f"no block {name[:60]!r}: blocks are named KIND:LAYER:HEAD or KIND:{THUMBS}")
            layers, heads, queries, keys = weights.shape
            maps = torch.from_numpy(weights.reshape(layers * heads, 1, queries, keys).astype(np.float32) / 65535)
            return _b64(codes(torch.nn.functional.adaptive_max_pool2d(maps, thumb_shape(queries, keys)), 8))
        layer, head = (int(p) if p.isdecimal() and len(p) < 6 else -1 for p in parts[1:])
        if not (0 <= layer < weights.shape[0] and 0 <= head < weights.shape[1]):
            raise ValueError(f"no block {name[:60]!r}: the {parts[0]} has {tuple(weights.shape[:2])} layers and heads")
        one = weights[layer, head]
        return _b64(one.tobytes() if bits == 16 else codes(one.astype(np.float32) / 65535, 8))

    def view_order(self, kind: str, layer: int, head: int | None) -> list[str]:
        """Return every block's name, in the order a page opened at (kind, 0-based layer, head) needs them.

        A head of None means all heads. The view itself comes first. Then comes what a change of kind shows: the page
        keeps the layer and the head when the visitor switches kind, so the same layer and head of the other kinds
        (their last layer where they have fewer). A one-head view's other heads of those layers follow. Then the
        thumbnails, its kind's first, then its kind's other layers, nearest first, and last the other kinds' other
        layers."""
        shown = {k: layer if k == kind else self.same_layer(k, layer) for k in KINDS}
        kinds = [kind] + [k for k in KINDS if k != kind]
        order = [name for k in kinds for name in self._layer_blocks(k, shown[k], head, only=True)]
        order += [name for k in kinds for name in self._layer_blocks(k, shown[k], head) if name not in order]
        order += [block_id(k) for k in kinds]
        layers = self.weights[kind].shape[0]
        nearest = sorted(range(layers), key=lambda other: (abs(other - layer), other))
        order += [name for other in nearest if other != layer for name in self._layer_blocks(kind, other, None)]
        for other_kind in kinds[1:]:
            other_layers = self.weights[other_kind].shape[0]
            order += [
                name
                for other in range(other_layers)
                if other != shown[other_kind]
                for name in self._layer_blocks(other_kind, other, None)
            ]
        return order

    def same_layer(self, kind: str, layer: int) -> int:
        """Return the 0-based layer of `kind` that the page shows after a switch to it from `layer`: the same one, or
        the kind's last where it has fewer layers (as view.js's `draw` clamps it)."""
        return min(layer, self.weights[kind].shape[0] - 1)

    def _layer_blocks(self, kind: str, layer: int, head: int | None, only: bool = False) -> list[str]:
        """Return the blocks of one layer of `kind`, the head `head` first (None: every head, in order); with `only`,
        just the blocks a view of that head shows (all heads for None)."""
        heads = self.weights[kind].shape[1]
        first = [head] if head is not None and head < heads else []
        rest = [] if only and first else [h for h in range(heads) if h not in first]
        return [block_id(kind, layer, h) for h in first + rest]

    def blocks(self, names, bits: int = 8) -> dict[str, str]:
        """Return the blocks `names` as {name: base64}; a bad name or bit width raises a ValueError."""
        if bits not in BITS:
            raise ValueError(f"bits must be one of {BITS}, not {str(bits)[:20]!r}")
        return {name: self.block(name, bits) for name in names}

    def packed(self, kind: str, layer: int, head: int | None, budget: int = PAGE_BUDGET) -> dict[str, str]:
        """Return the blocks a page opened at this view gets with the translation, as {name: base64}.

        They are taken in `view_order`, each one that still fits in `budget` base64 characters."""
        chosen, used = {}, 0
        for name in self.view_order(kind, layer, head):
            size = self._b64_size(name)
            if used + size <= budget:
                chosen[name] = self.block(name)
                used += size
        return chosen

    def _b64_size(self, name: str) -> int:
        kind, rest = name.split(":", 1)
        layers, heads, queries, keys = self.weights[kind].shape
        cells = layers * heads * np.prod(thumb_shape(queries, keys)) if rest == THUMBS else queries * keys
        return 4 * ((int(cells) + 2) // 3)


class WeightCache:
    """Keep the last translations' `PageWeights` by key, bounded by count and bytes, dropping the oldest first.

    The queue's worker and the page's requests share the cache, so a lock guards it."""

    def __init__(self, translations: int = CACHE_TRANSLATIONS, max_bytes: int = CACHE_BYTES):
        self.translations, self.max_bytes = translations, max_bytes
        self._items: OrderedDict[str, PageWeights] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, weights: PageWeights) -> None:
        with self._lock:
            self._items[weights.key] = weights
            while len(self._items) > self.translations or (
                len(self._items) > 1 and sum(w.nbytes for w in self._items.values()) > self.max_bytes
            ):
                self._items.popitem(last=False)

    def get(self, key) -> PageWeights | None:
        with self._lock:
            found = self._items.get(key) if isinstance(key, str) else None
            if found is not None:
                self._items.move_to_end(key)
            return found


def answer_blocks(cache: WeightCache, request) -> dict:
    """Answer the viewer's request for blocks; this is the viewer's server function.

    `request` is {"key", "blocks": [names], "bits": 8 or 16}. The answer is {"blocks": {name: base64}}, or
    {"error": one sentence} for a request the page did not write or for weights the server no longer keeps."""

    if not isinstance(request, dict):
        return {"error": "A request for attention weights is an object {key, blocks, bits}."}
    weights = cache.get(request.get("key"))
    if weights is None:
        return {
            "error": f"The server keeps the weights of its last {cache.translations} translations only; "
            "translate the sentence again to see this view."
        }
    names = request.get("blocks")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return {"error": "blocks must be a list of block names."}
    try:
        return {"blocks": weights.blocks(names, request.get("bits", 8))}
    except ValueError as error:
        return {"error": str(error)}


def page_kinds(attentions: Attentions) -> dict:
    """Return each kind's title, tokens and shapes for the page; the weights themselves travel as blocks."""
    kinds = {}
    for kind in KINDS:
        queries, keys = attentions.axis_labels(kind)
        shape = list(attentions.weights(kind).shape)
        kinds[kind] = {
            "title": KIND_TITLES[kind],
            "queries": queries,
            "keys": keys,
            "shape": shape,
            "thumb": list(thumb_shape(*shape[2:])),
        }
    return kinds


__all__ = [
    "PAGE_BUDGET",
    "THUMB",
    "CACHE_TRANSLATIONS",
    "CODES",
    "PageWeights",
    "WeightCache",
    "answer_blocks",
    "block_id",
    "codes",
    "decode",
    "page_kinds",
]
