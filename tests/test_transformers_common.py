"""transformers' own common model tests, run against VaswaniConfig, VaswaniModel and
VaswaniForConditionalGeneration as every model inside transformers is tested, and against the decoder alone
(VaswaniDecoder, VaswaniForCausalLM) as transformers tests Marian's (MarianStandaloneDecoderModelTest).

The mixins come from the installed transformers version's own test files (transformers_tests.py fetches them once
into a cache outside the repository; nothing of them is copied here): `ModelTesterMixin` (which brings
`ExportTesterMixin`), `GenerationTesterMixin` and `ConfigTester.run_common_tests`. The tester below is shaped as
transformers' own testers (MarianModelTester's shape: a tiny config, `prepare_config_and_inputs_for_common` with
input_ids, attention_mask, decoder_input_ids and decoder_attention_mask); the decoder's tester has the shape of
MarianStandaloneDecoderModelTester.

No test is skipped here: the skips of a run are the mixin's own, each the same for MarianMTModel under the same
mixins on this machine (a GPU, flash attention, DeepSpeed or the kernels library needed; no RoPE, experts, tensor
parallel plan, sub-configs or weight renaming to test; `@slow`), plus the stand-in's report that transformers'
generation tests did not run (tests/transformers_test_standins.py).

Without network and without the cache this module is skipped with one sentence saying what to do; in CI (`CI=true`,
as .ci/run sets) a failed download is a collection error instead.
"""

import unittest
from unittest import mock

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers_tests import CommonTestsUnavailable, in_ci, load_common_tests

from vaswani_hf import VaswaniConfig, VaswaniForCausalLM, VaswaniForConditionalGeneration, VaswaniModel
from vaswani_hf.modeling_vaswani import VaswaniDecoder

try:
    COMMON = load_common_tests()
except CommonTestsUnavailable as unavailable:
    if in_ci():  # a collection error: the run fails, naming what is missing
        pytest.fail(f"transformers' common tests are missing in CI: {unavailable}", pytrace=False)
    pytest.skip(str(unavailable), allow_module_level=True)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ModelTesterMixin = COMMON["modeling"].ModelTesterMixin
ids_tensor = COMMON["modeling"].ids_tensor
ConfigTester = COMMON["configuration"].ConfigTester
GenerationTesterMixin = COMMON["generation"].GenerationTesterMixin


class VaswaniModelTester:
    """A tiny model and inputs, as transformers' model testers build them (MarianModelTester's sizes); token ids
    follow vaswani_hf's vocabulary (<pad>=0 also starts the decoder, <s>=1, </s>=2)."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=16):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 4
        self.hidden_dropout_prob = 0.1
        self.attention_probs_dropout_prob = 0.1
        self.max_position_embeddings = 100
        self.pad_token_id = 0
        self.bos_token_id = 1
        self.eos_token_id = 2
        self.decoder_start_token_id = 0

    def get_config(self):
        return VaswaniConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            num_encoder_layers=self.num_hidden_layers,
            num_decoder_layers=self.num_hidden_layers,
            num_heads=self.num_attention_heads,
            d_ff=self.intermediate_size,
            dropout=self.hidden_dropout_prob,
            attention_dropout=self.attention_probs_dropout_prob,
            max_position_embeddings=self.max_position_embeddings,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        decoder_input_ids[:, 0] = self.decoder_start_token_id
        inputs = {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(self.pad_token_id).long(),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": torch.ones_like(decoder_input_ids),
        }
        return self.get_config(), inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class NamedLikeTransformersModels:
    """Add our class names to transformers' tables of its own models' class names while a test class runs.

    The mixin tells a base model from a head by these tables (a base model has no loss to train, a head's base model
    loads a base checkpoint, a causal LM's loss must honour `shift_labels`, ...). vaswani_hf registers its classes
    with the Auto classes (`AutoModel.register`), which fills the Auto mappings but not these name tables: our names
    are added to them while the class runs, as a model inside transformers has them. `name_tables` maps each table's
    name in `modeling_auto` to our class name in it."""

    name_tables: dict[str, str] = {}

    @classmethod
    def setUpClass(cls):
        cls.patches = [
            mock.patch.dict(getattr(modeling_auto, table), {"vaswani": name})
            for table, name in cls.name_tables.items()
        ]
        for patch in cls.patches:
            patch.start()

    @classmethod
    def tearDownClass(cls):
        for patch in cls.patches:
            patch.stop()


class VaswaniModelTest(NamedLikeTransformersModels, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (VaswaniModel, VaswaniForConditionalGeneration)
    is_encoder_decoder = True
    # The mixin runs `test_can_init_all_missing_weights` for models added from 2023 on (it reads the copyright year
    # of the configuration file, which ours does not carry) and for older ones that set this: our `_init_weights`
    # covers every weight, so the test runs.
    test_can_init_all_missing_weights_before_2023 = True
    name_tables = {
        "MODEL_MAPPING_NAMES": "VaswaniModel",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "VaswaniForConditionalGeneration",
    }

    def setUp(self):
        self.model_tester = VaswaniModelTester(self)
        self.config_tester = ConfigTester(self, config_class=VaswaniConfig)

    def test_config(self):
        self.config_tester.run_common_tests()


class VaswaniStandaloneDecoderModelTester:
    """The decoder alone and its inputs, in the shape of transformers' MarianStandaloneDecoderModelTester: a tiny
    config of the decoder stack (`is_encoder_decoder=False`), input_ids and a random 0/1 attention_mask."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=False, vocab_size=99, hidden_size=16):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = self.decoder_seq_length = self.decoder_key_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = self.d_model = hidden_size
        self.num_hidden_layers = self.decoder_layers = 2
        self.num_attention_heads = 4
        self.max_position_embeddings = 100
        self.pad_token_id, self.bos_token_id, self.eos_token_id, self.decoder_start_token_id = 0, 1, 2, 0
        self.is_encoder_decoder = False
        self.base_model_out_len, self.decoder_attention_idx = 2, 1

    def get_config(self):
        return VaswaniConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            num_encoder_layers=self.num_hidden_layers,
            num_decoder_layers=self.decoder_layers,
            num_heads=self.num_attention_heads,
            d_ff=32,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=self.max_position_embeddings,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            is_encoder_decoder=False,
            is_decoder=True,
            use_cache=False,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = ids_tensor([self.batch_size, self.seq_length], vocab_size=2)
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class VaswaniStandaloneDecoderModelTest(
    NamedLikeTransformersModels, ModelTesterMixin, GenerationTesterMixin, unittest.TestCase
):
    """The decoder stack alone under transformers' common tests, as MarianStandaloneDecoderModelTest runs
    MarianDecoder and MarianForCausalLM."""

    all_model_classes = (VaswaniDecoder, VaswaniForCausalLM)
    is_encoder_decoder = False
    test_can_init_all_missing_weights_before_2023 = True
    # VaswaniDecoder is the stack without a head, the base model of this test (as VaswaniModel is of the seq2seq
    # one): the table tells the training tests that it has no loss to train. With it, the training tests run on
    # VaswaniForCausalLM (is_training=True), which Marian's tester turns off.
    name_tables = {"MODEL_MAPPING_NAMES": "VaswaniDecoder", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "VaswaniForCausalLM"}

    def setUp(self):
        self.model_tester = VaswaniStandaloneDecoderModelTester(self, is_training=True)
        self.config_tester = ConfigTester(self, config_class=VaswaniConfig, is_encoder_decoder=False)

    def test_config(self):
        self.config_tester.run_common_tests()


def test_the_config_stand_in_holds_every_field_of_the_installed_base_config():
    """The stand-in's `config_common_kwargs` (transformers_test_standins.py) names every setting of the installed
    PreTrainedConfig at a value other than its default, as transformers' own completeness test demands of the
    real one: a new base setting in a newer transformers makes this fail instead of going untested."""
    if "utils.test_configuration_utils" not in COMMON["standins"]:
        pytest.skip("transformers' own config_common_kwargs is in use (a full checkout of its tests)")
    from transformers import PreTrainedConfig
    from transformers_test_standins import config_common_kwargs

    base = PreTrainedConfig()
    public = {key.lstrip("_") for key in vars(base) if not key.startswith("_") or key == "_output_attentions"}
    missing = public - set(config_common_kwargs) - {"transformers_version", "is_encoder_decoder"}
    assert not missing
    defaults = [key for key in public & set(config_common_kwargs) if getattr(base, key) == config_common_kwargs[key]]
    assert not defaults
