"""Integrate with the Hugging Face Hub: write the model card, the Hub-ready model folder, and upload it in one commit.

The modules are `card` (the model card), `folder` (the Hub-ready model folder with its Inference Endpoints handler)
and `upload` (the one-commit upload). Exports that write Hub folders of other architectures
(`vaswani_hf.export.marian`) build on these, but nothing here imports them."""

from .card import (
    VASWANI_CARD,
    Architecture,
    CardVariant,
    count_parameters,
    count_parameters_in_folder,
    normalize_metrics,
    read_card_inputs,
    render_model_card,
    write_model_card,
)
from .folder import add_handler, missing_code_files, save_hub_folder
from .upload import check_folder, list_upload_files, push_folder

__all__ = [
    "render_model_card",
    "write_model_card",
    "read_card_inputs",
    "normalize_metrics",
    "count_parameters",
    "count_parameters_in_folder",
    "add_handler",
    "list_upload_files",
    "check_folder",
    "push_folder",
    "CardVariant",
    "Architecture",
    "VASWANI_CARD",
    "save_hub_folder",
    "missing_code_files",
]
