"""Resuming a checkpoint's weights (VaswaniTrainer._load_from_checkpoint): tied tensors (Section 3.4: the two
embeddings and the pre-softmax projection share one matrix, saved once) are not reported missing; a truly missing
tensor still is."""

from __future__ import annotations

import logging

import pytest
import torch
from safetensors.torch import load_file, save_file

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training.trainer import VaswaniTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int) -> VaswaniForConditionalGeneration:
    torch.manual_seed(seed)
    return VaswaniForConditionalGeneration(
        VaswaniConfig(vocab_size=40, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1)
    )


def _trainer(tmp_path, model) -> VaswaniTrainer:
    from transformers import Seq2SeqTrainingArguments

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True, disable_tqdm=True)
    return VaswaniTrainer(model=model, args=args, max_tokens=64)


def _warnings(caplog, trainer, folder) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trainer._load_from_checkpoint(str(folder))
    return [r.getMessage() for r in caplog.records if "keys in the checkpoint" in r.getMessage()]


def test_a_resume_does_not_report_tied_keys_and_loads_them(tmp_path, caplog):
    saved = _model(1)
    saved.save_pretrained(tmp_path / "checkpoint-2")
    stored = load_file(str(tmp_path / "checkpoint-2" / "model.safetensors"))
    assert "lm_head.weight" not in stored  # safetensors keeps one name of the tied matrix
    model = _model(2)
    trainer = _trainer(tmp_path, model)
    assert _warnings(caplog, trainer, tmp_path / "checkpoint-2") == []
    torch.testing.assert_close(model.lm_head.weight, saved.model.shared.weight)
    torch.testing.assert_close(model.model.decoder.embed_tokens.weight, saved.model.shared.weight)
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()  # still tied


def test_a_truly_missing_key_is_still_reported(tmp_path, caplog):
    _model(1).save_pretrained(tmp_path / "checkpoint-2")
    path = tmp_path / "checkpoint-2" / "model.safetensors"
    stored = load_file(str(path))
    lost = next(k for k in stored if "layers.0" in k and k.endswith("weight"))
    save_file({k: v for k, v in stored.items() if k != lost}, str(path), metadata={"format": "pt"})
    messages = _warnings(caplog, _trainer(tmp_path, _model(2)), tmp_path / "checkpoint-2")
    assert len(messages) == 1 and lost in messages[0] and "lm_head.weight" not in messages[0], messages
    # the shared matrix itself missing: its tied names are missing too, and reported
    save_file({k: v for k, v in stored.items() if k != "model.shared.weight"}, str(path), metadata={"format": "pt"})
    messages = _warnings(caplog, _trainer(tmp_path, _model(2)), tmp_path / "checkpoint-2")
    assert len(messages) == 1 and "model.shared.weight" in messages[0] and "lm_head.weight" in messages[0], messages
