"""What the Space's page receives (vaswani_hf.space.payload): every weight as a one-byte code within its stated error,
a translation's payload bounded by design at any model size or sentence length, the first view's weights in it, the
rest answered on the page's request, and /attention's stated precision and packed form. The page in a browser:
tests/test_space_browser.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vaswani_hf.configuration_vaswani import SettingError
from vaswani_hf.space import logic
from vaswani_hf.space import payload as payloads
from vaswani_hf.visualize import Attentions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SENTENCE = "a man is riding a horse ."


def code_error(w: np.ndarray, bits: int) -> np.ndarray:
    """The stated bound of a code's error (space.payload.ERRORS), and float32's rounding."""
    assert payloads.ERRORS == {8: "sqrt(w) / 255 + 1/260100 + 1/131070", 16: "1/131070"}
    bound = np.sqrt(w) / 255 + 1 / 260100 + 1 / 131070 if bits == 8 else np.full_like(w, 1 / 131070)
    return bound + 1e-7


def random_attentions(layers: int, heads: int, source: int, target: int, seed: int = 0) -> Attentions:
    """Softmax rows of a model of this shape (no model needed: the packing reads only the weights and tokens)."""
    generator = torch.Generator().manual_seed(seed)

    def rows(queries, keys):
        return torch.softmax(3 * torch.randn(layers, heads, queries, keys, generator=generator), dim=-1)

    tokens = [f"▁t{i}" for i in range(source)]
    out = [f"▁o{i}" for i in range(target)]
    return Attentions(
        tokens, out, ["<start>"] + out[:-1], rows(source, source), rows(target, target), rows(target, source)
    )


def page_model(layers: int, heads: int) -> logic.SpaceModel:
    facts = logic.ModelFacts("m")
    return logic.SpaceModel(
        None, None, facts, layers={k: layers for k in ("encoder", "decoder", "cross")}, heads=heads
    )


@pytest.fixture(scope="module")
def space(tiny):  # noqa: F811
    return logic.load_space_model(str(tiny["folder"]))


def test_a_small_translation_sends_every_weight_within_the_codes_stated_error(space):
    """A short sentence on a small model fits whole: every head's block and the thumbnails, one byte a weight."""
    attn = logic.translate_text(space, SENTENCE, 2, 0.6).attentions
    payload = logic.attention_payload(space, attn)
    assert "view" not in payload and payload["heads"] == 4 and payload["code"] == payloads.CODES[8]
    for kind in ("encoder", "decoder", "cross"):
        packed, weights = payload["kinds"][kind], attn.weights(kind).numpy()
        assert (packed["queries"], packed["keys"]) == attn.axis_labels(kind)
        assert packed["shape"] == list(weights.shape)
        for layer in range(2):
            for head in range(4):
                got = payloads.decode(payload["blocks"][f"{kind}:{layer}:{head}"], 8)
                want = weights[layer, head].ravel()
                bad = np.abs(got - want) > code_error(want, 8)
                assert not bad.any(), (kind, layer, head, want[bad], got[bad])
        tq, tk = packed["thumb"]
        thumbs = payloads.decode(payload["blocks"][f"{kind}:thumbs"], 8).reshape(2 * 4, tq, tk)
        pooled = torch.nn.functional.adaptive_max_pool2d(
            torch.tensor(weights).reshape(8, *weights.shape[2:]), (tq, tk)
        )
        assert (np.abs(thumbs - pooled.numpy()) <= code_error(pooled.numpy(), 8)).all()


def test_the_page_gets_the_weights_to_16_bits_on_request_and_a_bad_request_in_one_sentence(space):
    attn = logic.translate_text(space, SENTENCE, 1, 0.6).attentions
    key = logic.attention_payload(space, attn)["key"]
    answer = payloads.answer_blocks(space.cache, {"key": key, "blocks": ["cross:1:3", "decoder:0:0"], "bits": 16})
    for name, (kind, layer, head) in (("cross:1:3", ("cross", 1, 3)), ("decoder:0:0", ("decoder", 0, 0))):
        want = attn.weights(kind)[layer, head].numpy().ravel()
        assert (np.abs(payloads.decode(answer["blocks"][name], 16) - want) <= code_error(want, 16)).all()
    for request, fragment in (
        ("x", "is an object"),
        ({"key": "unknown", "blocks": []}, "last 16 translations"),
        ({"key": key, "blocks": "cross:0:0"}, "a list of block names"),
        ({"key": key, "blocks": ["cross:9:0"]}, "no block 'cross:9:0'"),
        ({"key": key, "blocks": ["cross:0"]}, "KIND:LAYER:HEAD"),
        ({"key": key, "blocks": ["self:0:0"]}, "no block"),
        ({"key": key, "blocks": ["cross:0:-1"]}, "no block"),
        ({"key": key, "blocks": ["cross:0:0"], "bits": 12}, "bits must be one of (8, 16)"),
    ):
        assert fragment in payloads.answer_blocks(space.cache, request)["error"], request


def test_the_server_keeps_the_last_translations_only():
    cache = payloads.WeightCache(translations=2, max_bytes=10**9)
    kept = [payloads.PageWeights.of(random_attentions(1, 1, 3, 3, seed)) for seed in range(3)]
    for weights in kept:
        cache.add(weights)
    assert cache.get(kept[0].key) is None and cache.get(kept[2].key) is kept[2] and cache.get(None) is None
    small = payloads.WeightCache(translations=10, max_bytes=kept[0].nbytes + 1)  # by bytes: the newest stays
    for weights in kept:
        small.add(weights)
    assert [small.get(w.key) is not None for w in kept] == [False, False, True]


@pytest.mark.parametrize(
    "layers, heads, source, target",
    [(6, 8, 200, 250), (6, 16, 200, 250), (2, 32, 200, 250), (1, 1, 3, 2)],
)
def test_a_translations_payload_is_bounded_by_design_at_any_size(layers, heads, source, target):
    """The base model (6 x 8) and the big one (6 x 16) at the page's longest sentence (200 source tokens, 250
    target), and a layer larger than the budget: the page's JSON stays under 2 MB, holds the first view's blocks in
    the order it needs them (as many as fit), and every other block is there on request."""
    space = page_model(layers, heads)
    attn = random_attentions(layers, heads, source, target)
    view = {"kind": "decoder", "layer": layers, "head": "all", "token": None}
    payload = logic.attention_payload(space, attn, view)
    text = json.dumps(payload, separators=(",", ":"))
    assert len(text) <= payloads.PAGE_BUDGET + 60_000 < 2_000_000
    weights = space.cache.get(payload["key"])
    order = weights.view_order("decoder", layers - 1, None)
    assert order[:heads] == [f"decoder:{layers - 1}:{h}" for h in range(heads)]
    assert len(order) == len(set(order)) == 3 * layers * heads + 3
    sent = [name for name in order if name in payload["blocks"]]
    assert sent and sent[0] == order[0] and set(payload["blocks"]) <= set(order)
    rest = payloads.answer_blocks(space.cache, {"key": payload["key"], "blocks": [n for n in order if n not in sent]})
    assert len(rest["blocks"]) + len(sent) == len(order)


def page_needs(kind: str, layer: int, head: int | None, weights: payloads.PageWeights) -> list[str]:
    """The blocks the page's head view needs (view.js's `needs`), at a 0-based layer it clamps to the kind's last."""
    layers, heads = weights.weights[kind].shape[:2]
    return [payloads.block_id(kind, min(layer, layers - 1), h) for h in ([head] if head is not None else range(heads))]


@pytest.mark.parametrize("head", [None, 2])
def test_a_change_of_kind_needs_no_block_the_translation_did_not_bring(head):
    """The page keeps the layer and the head when the visitor switches kind, so the translation brings that layer of
    every kind, before the thumbnails and the other layers: with a budget that holds only those layers, a switch to
    either other kind finds every block it needs."""
    layers, heads = 6, 8
    weights = payloads.PageWeights.of(random_attentions(layers, heads, 60, 70))
    layer = 3
    needed = [n for kind in ("decoder", "encoder", "cross") for n in page_needs(kind, layer, head, weights)]
    budget = sum(weights._b64_size(name) for name in needed)
    sent = weights.packed("decoder", layer, head, budget=budget)
    assert sorted(sent) == sorted(needed)
    assert weights.view_order("decoder", layer, head)[: len(needed)] == needed  # the view, then the other kinds
    if head is None:  # then the thumbnails, the view's kind's first
        more = weights.packed("decoder", layer, head, budget=budget + weights._b64_size("decoder:thumbs"))
        assert set(more) - set(sent) == {"decoder:thumbs"}
    else:  # then the other heads of the three layers
        assert weights.view_order("decoder", layer, head)[len(needed)] == "decoder:3:0"


def test_a_kind_with_fewer_layers_brings_its_last_layer():
    """A model with fewer decoder layers than encoder layers: a switch from the encoder's layer 5 to the decoder (2
    layers) shows the decoder's last layer, which the translation brings."""
    encoder, decoder = random_attentions(6, 2, 5, 4), random_attentions(2, 2, 5, 4)
    attentions = Attentions(
        encoder.source_tokens,
        decoder.target_tokens,
        decoder.decoder_input_tokens,
        encoder.encoder,
        decoder.decoder,
        decoder.cross,
    )
    weights = payloads.PageWeights.of(attentions)
    order = weights.view_order("encoder", 4, None)
    assert order[:6] == ["encoder:4:0", "encoder:4:1", "decoder:1:0", "decoder:1:1", "cross:1:0", "cross:1:1"]
    assert len(order) == len(set(order)) == (6 + 2 + 2) * 2 + 3


def test_at_the_longest_sentence_the_other_kinds_layers_are_sent_as_far_as_the_budget_holds():
    """The base model's shape at the page's longest sentence: the three kinds' current layers (1.63 million base64
    characters) exceed the budget (1.5 million), so the view's layer and the encoder's are sent whole and as many
    of the cross-attention's heads as fit; the thumbnails, which no longer fit, come on request."""
    layers, heads = 6, 8
    space = page_model(layers, heads)
    view = {"kind": "decoder", "layer": 2, "head": "all", "token": None}
    payload = logic.attention_payload(space, random_attentions(layers, heads, 200, 250), view)
    weights = space.cache.get(payload["key"])
    current = {kind: page_needs(kind, 1, None, weights) for kind in ("decoder", "encoder", "cross")}
    assert sum(weights._b64_size(n) for names in current.values() for n in names) > payloads.PAGE_BUDGET
    sent = set(payload["blocks"])
    assert set(current["decoder"]) <= sent and set(current["encoder"]) <= sent
    assert [n in sent for n in current["cross"]] == [True] * 6 + [False] * 2
    assert sent == {*current["decoder"], *current["encoder"], *current["cross"][:6]}


def test_an_examples_view_that_the_model_lacks_says_which_layer_it_shows():
    space = page_model(3, 4)
    attn = random_attentions(3, 4, 5, 4)
    figure = logic.EXAMPLES[0]
    shown = logic.attention_payload(space, attn, figure.view)["view"]
    assert (shown["layer"], shown["head"]) == (3, "all")
    assert shown["note"] == (
        "The paper's figure shows layer 5; this model's encoder self-attention has 3 layers, so its last, layer 3, "
        "is shown."
    )
    cross = logic.attention_payload(space, attn, logic.EXAMPLES[2].view)["view"]
    assert cross["kind"] == "cross" and cross["layer"] == 3 and "note" not in cross  # "last": no figure to differ from


def test_example_labels_say_when_the_text_lies_outside_the_models_domain():
    captions = logic.ModelFacts("vaswani-multi30k", datasets=["../shared/data/multi30k/raw"])
    news = logic.ModelFacts("org/wmt14-base", datasets=["wmt14"])
    unknown = logic.ModelFacts("some-model")
    tested = logic.ModelFacts("vaswani-transformer-en-de", bleu="28.96 sacreBLEU on multi30k/raw/test_2016_flickr")
    assert logic.model_domain(tested) == logic.CAPTIONS  # a card of local data names its test set only
    for example in logic.EXAMPLES:
        for facts, domain in ((captions, logic.CAPTIONS), (news, logic.NEWS)):
            label = logic.example_label(example, facts)
            assert label.startswith(example.label)
            assert ("outside this model's domain" in label) == (example.domain != domain), (label, domain)
        assert logic.example_label(example, unknown) == example.label
    assert {e.domain for e in logic.EXAMPLES[:2]} == {logic.NEWS} and logic.EXAMPLES[2].domain == logic.CAPTIONS


def test_the_api_answers_to_a_stated_precision_or_packed(space):
    attn = logic.translate_text(space, SENTENCE, 2, 0.6).attentions
    want = attn.cross[1, 2].numpy()
    one = logic.attention_numbers(space, attn, "cross", 2, "3")
    assert (one["kind"], one["layer"], one["head"], one["shape"]) == ("cross", 2, 3, list(want.shape))
    assert (one["queries"], one["keys"]) == (attn.target_tokens, attn.source_tokens)
    assert np.abs(np.array(one["weights"]) - want).max() <= 5e-5 + 1e-9  # 4 decimals, the default
    text = json.dumps(one["weights"])
    assert len(text) / want.size < 8.5  # "0.0123, ": not float32 in float64's long form
    six = logic.attention_numbers(space, attn, "cross", 2, "3", decimals=6)
    assert np.abs(np.array(six["weights"]) - want).max() <= 5e-7 + 1e-9
    every = logic.attention_numbers(space, attn, "decoder", 1, "all", packed_bits=8)
    assert every["weights"] is None and every["code"] == payloads.CODES[8] and every["shape"][0] == 4
    got = payloads.decode(every["packed"], 8).reshape(every["shape"])
    assert (np.abs(got - attn.decoder[0].numpy()) <= code_error(attn.decoder[0].numpy(), 8)).all()
    for bad, fragment in (({"decimals": 0}, "decimals must be"), ({"packed_bits": 4}, "packed_bits must be one of")):
        with pytest.raises(SettingError, match=fragment):
            logic.attention_numbers(space, attn, "cross", 1, "all", **bad)
