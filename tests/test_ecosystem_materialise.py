"""Three client calls that materialise or read the Hub folder as Marian's export allows (docs/ecosystem.md): a model
moved to the meta device and back (how accelerate and FSDP materialise models), accelerate's `init_empty_weights` +
`load_checkpoint_and_dispatch` without a manual `tie_weights()`, a plain forward of the loaded folder returning a
cache, and the tokenizer read without any code of ours."""

import copy
import json

import pytest
import torch
from conftest import run_python
from translation_model import SUBPROCESS_ENV

from vaswani_hf.hub import save_hub_folder
from vaswani_hf.modeling_vaswani import sinusoid_table
from vaswani_hf.translation.inference import translate

# one torch thread for the module's tiny models (translation_model.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")

SOURCES = ["a man runs in the park", "the big red ball near water with a child"]


@pytest.fixture(scope="module")
def hub_folder(model, tokenizer, tmp_path_factory):  # noqa: F811
    """The folder a training run publishes, from a model whose config the Trainer set to `use_cache=False`."""
    trained = copy.deepcopy(model)
    trained.config.use_cache = False  # what Trainer.__init__ writes (TrainingArguments.use_cache defaults to False)
    out = tmp_path_factory.mktemp("hub") / "hub"
    save_hub_folder(trained, tokenizer, out, training_info={"source_lang": "en", "target_lang": "de"})
    return out


def test_a_model_moved_to_meta_and_back_translates_as_before(model, tokenizer):  # noqa: F811
    """to("meta"), to_empty, load_state_dict: the sinusoids (Section 3.5, in no state dict) are not left stale."""
    state = model.state_dict()
    moved = copy.deepcopy(model).to("meta").to_empty(device="cpu")
    moved.load_state_dict(state)
    positions = torch.arange(7)
    assert torch.equal(moved.model.encoder.embed_positions(positions), sinusoid_table(7, model.config.d_model))
    assert translate(moved.eval(), tokenizer, SOURCES, progress=False) == translate(
        model, tokenizer, SOURCES, progress=False
    )


def test_marian_survives_the_same_move():
    """The reference: Marian keeps its table in the state dict, so the same calls restore it."""
    from transformers import MarianConfig, MarianMTModel

    marian = MarianMTModel(
        MarianConfig(
            vocab_size=50,
            d_model=16,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            pad_token_id=49,
            decoder_start_token_id=49,
        )
    ).eval()
    ids, decoder_ids = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[49, 5, 6]])
    moved = copy.deepcopy(marian).to("meta").to_empty(device="cpu")
    moved.load_state_dict(marian.state_dict())
    assert torch.equal(
        moved(input_ids=ids, decoder_input_ids=decoder_ids).logits,
        marian(input_ids=ids, decoder_input_ids=decoder_ids).logits,
    )


@pytest.mark.parametrize("device_map", ["auto", {"": "cpu"}])
def test_init_empty_weights_and_load_checkpoint_and_dispatch_need_no_manual_tie(
    hub_folder,
    model,
    tokenizer,  # noqa: F811
    device_map,
):
    """accelerate's big-model loading: `init_empty_weights` re-creates the shared embedding's parameters (the tie of
    Section 3.4 is lost), the checkpoint holds `model.shared.weight` once; the moved model ties them again."""
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    with init_empty_weights():
        empty = AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(hub_folder))
    assert empty.lm_head.weight is not empty.model.shared.weight  # what the loader leaves
    loaded = load_checkpoint_and_dispatch(empty, str(hub_folder), device_map=device_map).eval()
    assert loaded.lm_head.weight is loaded.model.shared.weight is loaded.model.encoder.embed_tokens.weight
    assert translate(loaded, tokenizer, SOURCES, progress=False) == translate(
        model, tokenizer, SOURCES, progress=False
    )


def test_the_hub_folder_config_says_use_cache_and_a_plain_forward_returns_a_cache(hub_folder, tokenizer):  # noqa: F811
    from transformers import AutoModelForSeq2SeqLM

    assert json.loads((hub_folder / "config.json").read_text())["use_cache"] is True
    loaded = AutoModelForSeq2SeqLM.from_pretrained(hub_folder).eval()
    batch = tokenizer(SOURCES[:1], return_tensors="pt")
    with torch.no_grad():
        out = loaded(**batch, decoder_input_ids=torch.tensor([[0, 5]]))
    assert out.past_key_values is not None and out.past_key_values.get_seq_length() == 2


def test_the_tokenizer_loads_without_the_package_and_without_its_code(hub_folder, tokenizer, tmp_path):  # noqa: F811
    """tokenizer_config.json names the plain PreTrainedTokenizerFast (tokenizer.json): no remote code, no prompt."""
    assert (
        json.loads((hub_folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    )
    code = f"""
import json, sys
from transformers import PreTrainedTokenizerFast
tok = PreTrainedTokenizerFast.from_pretrained({str(hub_folder)!r})
print("RESULT" + json.dumps([tok({SOURCES!r})["input_ids"], tok.pad_token_id,
                             sorted(m for m in sys.modules if m.startswith(("vaswani_hf", "transformers_modules")))]))
"""
    env = {**SUBPROCESS_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    ids, pad, leaked = json.loads(run_python(code, cwd=tmp_path, env=env, block_package=True).split("RESULT", 1)[1])
    assert ids == tokenizer(SOURCES)["input_ids"] and pad == tokenizer.pad_token_id and leaked == []
