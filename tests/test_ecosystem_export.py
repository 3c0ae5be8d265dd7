"""The model under torch.compile and ONNX (docs/ecosystem.md): a training forward with labels compiles as one graph,
and both ONNX exporters give a model that runs other shapes than the traced one, with PyTorch's logits."""

import warnings

import pytest
import torch
from conftest import tiny_config

from vaswani_hf import VaswaniForConditionalGeneration

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def batch(batch_size, source_length, target_length, seed):
    """Right-padded source and labels (-100 behind each target), the first row the shortest."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 64, (batch_size, source_length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, source_length - 2 :] = 0
    labels = torch.randint(4, 64, (batch_size, target_length), generator=g)
    labels[0, target_length - 2 :] = -100
    return ids, mask, labels


# --- torch.compile -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attn_implementation, position_encoding, trainer_inputs",
    [("sdpa", "sinusoidal", False), ("eager", "learned", True)],
)
def test_a_training_forward_with_labels_is_one_graph(attn_implementation, position_encoding, trainer_inputs):
    """No graph break, so no device-to-host synchronisation either: with dropout and padding, and with what
    Seq2SeqTrainer adds (the target padding mask, `num_items_in_batch` as a tensor) or without it."""
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(
        tiny_config(dropout=0.1, attn_implementation=attn_implementation, position_encoding=position_encoding)
    ).train()
    ids, mask, labels = batch(3, 7, 6, seed=1)
    extra = {"decoder_attention_mask": (labels != -100).long(), "num_items_in_batch": torch.tensor(11)}

    def loss(input_ids, attention_mask, labels, extra):
        return model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **extra).loss

    explained = torch._dynamo.explain(loss)(ids, mask, labels, extra if trainer_inputs else {})
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_generate_never_calls_forward_but_calls_the_encoder():
    """What docs/ecosystem.md tells users who compile: the paper's decoding (our lean loops) never calls `forward`, so
    a compiled `forward` compiles nothing there; the encoder runs once per batch through its own `forward`."""
    from torch._dynamo.testing import CompileCounter

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config()).eval()
    ids, mask, _ = batch(3, 7, 2, seed=4)
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6)
    torch._dynamo.reset()
    for module in (model, model.get_encoder()):
        counter = CompileCounter()
        module.forward = torch.compile(module.forward, backend=counter)
        try:
            assert torch.equal(model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6), expected)
        finally:
            del module.forward
        assert counter.frame_count == (0 if module is model else 1)


# --- ONNX ----------------------------------------------------------------------------------------------------------


class Logits(torch.nn.Module):
    """The encoder-decoder forward as an exporter sees it: three int64 inputs, the logits out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        ).logits


NAMES = ["input_ids", "attention_mask", "decoder_input_ids"]


def export(module, path, dynamo):
    ids, mask, labels = batch(2, 7, 5, seed=0)
    example = (ids, mask, labels.clamp(min=0))
    if dynamo:
        source, target, rows = torch.export.Dim("source"), torch.export.Dim("target"), torch.export.Dim("rows")
        shapes = {
            "input_ids": {0: rows, 1: source},
            "attention_mask": {0: rows, 1: source},
            "decoder_input_ids": {0: rows, 1: target},
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on axis names
            torch.onnx.export(
                module,
                example,
                str(path),
                input_names=NAMES,
                output_names=["logits"],
                dynamo=True,
                dynamic_shapes=shapes,
                verbose=False,
            )
    else:  # the TorchScript exporter with dynamic axes, as most deployment guides show
        axes = {
            "input_ids": {0: "rows", 1: "source"},
            "attention_mask": {0: "rows", 1: "source"},
            "decoder_input_ids": {0: "rows", 1: "target"},
            "logits": {0: "rows", 1: "target"},
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
            torch.onnx.export(
                module,
                example,
                str(path),
                input_names=NAMES,
                output_names=["logits"],
                dynamic_axes=axes,
                dynamo=False,
                opset_version=17,
            )


@pytest.mark.slow
@pytest.mark.parametrize(
    "dynamo, attn_implementation",
    [(False, "sdpa"), (False, "eager"), (True, "sdpa")],
    ids=["torchscript-sdpa", "torchscript-eager", "dynamo-sdpa"],
)
def test_onnx_export_runs_other_shapes_with_pytorchs_logits(dynamo, attn_implementation, tmp_path):
    """The exported model on the traced shape and two others (rows, source and target lengths all changed)."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    if dynamo:
        pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(attn_implementation=attn_implementation)).eval()
    module = Logits(model)
    export(module, tmp_path / "model.onnx", dynamo)
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for rows, source, target in ((2, 7, 5), (3, 11, 4), (1, 3, 9)):  # the traced shape, then others
        ids, mask, labels = batch(rows, source, target, seed=rows + source)
        inputs = (ids, mask, labels.clamp(min=0))
        (logits,) = session.run(None, {name: x.numpy() for name, x in zip(NAMES, inputs)})
        with torch.no_grad():
            expected = module(*inputs)
        assert logits.shape == tuple(expected.shape)
        assert torch.allclose(torch.from_numpy(logits), expected, atol=1e-4), (rows, source, target)
