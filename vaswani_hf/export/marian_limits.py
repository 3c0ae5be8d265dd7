"""Check, before an export (`vaswani-export-marian`), that transformers' `MarianMTModel` can express our model.

Marian's architecture is the paper's with some choices fixed (`transformers/models/marian/modeling_marian.py`): only
sinusoidal positions, d_k = d_v = d_model / h, and LayerNorms built as `nn.LayerNorm(d_model)`, that is with PyTorch's
default epsilon of 1e-5, which MarianConfig has no field to change. `to_marian` sets our epsilon on the converted model
in memory, but a saved Marian folder reloads with 1e-5. LayerNorm divides by sqrt(var + eps), so the reloaded logits
move by about |eps - 1e-5| / (2 var) relative. Within EPS_TOLERANCE of 1e-5 (our default 1e-6 included) that is the
conversion's own accuracy, about 1e-6; any other epsilon would reload as another model, so it is refused here.

This is kept apart from `vaswani_hf.export.marian`, the conversion itself: these are the refusals a user's model
meets, as `UsageError`s naming the file and the field, before any work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io.files import CONFIG, read_json

# An epsilon at most this far from Marian's reloads with logits that agree to about 1e-6 relative.
EPS_TOLERANCE = 1e-5


def marian_layer_norm_eps() -> float:
    """Return the epsilon of every LayerNorm of a reloaded MarianMTModel.

    It is PyTorch's default, which Marian's modeling code gets because it passes none."""
    import torch

    return float(torch.nn.LayerNorm(1).eps)


def marian_refusals(config: Mapping[str, Any] | Any) -> list[str]:
    """Return why a model of `config` cannot be exported to a MarianMTModel that computes the same function.

    `config` is a VaswaniConfig or the dict of its config.json. The result holds one "field: reason" per problem, and
    is [] when the model can be exported."""
    get = config.get if isinstance(config, Mapping) else (lambda key, default=None: getattr(config, key, default))
    d_model, heads = get("d_model", 512), get("num_heads", 8)
    width = d_model // heads if isinstance(d_model, int) and isinstance(heads, int) and heads > 0 else None
    problems = []
    if get("position_encoding", "sinusoidal") != "sinusoidal":
        problems.append(
            f"position_encoding is {get('position_encoding')!r}: MarianMTModel has only sinusoidal "
            "positions (learned ones cannot be exported)"
        )
    for field in ("d_k", "d_v"):
        value = get(field)
        if value is not None and (width is None or value != width or width * heads != d_model):
            problems.append(
                f"{field} is {value}: MarianMTModel needs d_k = d_v = d_model / num_heads ({d_model} / {heads})"
            )
    eps, marian = get("layer_norm_eps", 1e-6), marian_layer_norm_eps()
    if isinstance(eps, (int, float)) and not abs(eps - marian) <= EPS_TOLERANCE:
        problems.append(
            f"layer_norm_eps is {eps:g}: a MarianMTModel's LayerNorms reload with {marian:g} (it has no "
            f"setting for it), so only an epsilon within {EPS_TOLERANCE:g} of it keeps the model's logits"
        )
    return problems


def check_marian_exportable(model_dir: str | os.PathLike) -> None:
    """Raise a UsageError naming the model folder's config.json and the first field that MarianMTModel cannot
    express, if there is one."""
    path = Path(model_dir) / "config.json"
    problems = marian_refusals(read_json(path, CONFIG))
    if problems:
        raise UsageError(
            f"{path}: cannot be exported to MarianMTModel: {problems[0]}; export to CTranslate2 "
            "(vaswani-export-ctranslate2) or serve the model with its own code"
        )
