import pytest

from vaswani_hf import VaswaniConfig
from vaswani_hf.validation_vaswani import SettingError


def test_base_and_big_presets_are_the_papers_models():
    base, big = VaswaniConfig.base(), VaswaniConfig.big()
    assert (base.d_model, base.d_ff, base.num_heads, base.d_k, base.d_v) == (512, 2048, 8, 64, 64)
    assert (base.num_encoder_layers, base.num_decoder_layers, base.dropout) == (6, 6, 0.1)
    assert not hasattr(base, "label_smoothing")  # a training setting (vaswani_hf.training.objective)
    assert (big.d_model, big.d_ff, big.num_heads, big.d_k, big.d_v, big.dropout) == (1024, 4096, 16, 64, 64, 0.3)
    assert base.sinusoid_layout == "interleaved" and base.position_encoding == "sinusoidal"
    assert base.tie_word_embeddings and base.scale_embedding and not base.attention_bias


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (dict(num_heads=1), dict(d_k=512, d_v=512)),  # Table 3 (A): d_k = d_v = d_model / h
        (dict(num_heads=32), dict(d_k=16, d_v=16)),
        (dict(d_k=16), dict(d_k=16, d_v=64)),  # (B): d_k alone
        (dict(num_encoder_layers=2, num_decoder_layers=2), dict(num_hidden_layers=2, decoder_layers=2)),  # (C)
        (dict(d_model=256), dict(d_k=32, hidden_size=256)),  # (C)
        (dict(d_ff=1024), dict(intermediate_size=1024)),  # (C)
        (dict(dropout=0.0), dict(dropout=0.0)),  # (D); its eps_ls = 0 is the objective's setting
        (dict(position_encoding="learned"), dict(position_encoding="learned")),  # (E)
    ],
)
def test_every_table3_row_is_an_override(overrides, expected):
    config = VaswaniConfig.base(**overrides)
    for key, value in expected.items():
        assert getattr(config, key) == value


def test_generic_names_map_to_paper_names():
    config = VaswaniConfig(d_model=128, num_heads=4, num_encoder_layers=3, num_decoder_layers=2, d_ff=256)
    assert config.hidden_size == 128 and config.num_attention_heads == 4
    assert config.encoder_layers == 3 and config.decoder_layers == 2 and config.encoder_ffn_dim == 256


def test_save_and_reload(tmp_path):
    config = VaswaniConfig.big(d_k=32, sinusoid_layout="concatenated")
    config.save_pretrained(tmp_path)
    again = VaswaniConfig.from_pretrained(tmp_path)
    assert again.to_dict() == config.to_dict()


def test_builds_without_arguments_and_keeps_generation_settings_out():
    config = VaswaniConfig()
    assert "num_beams" not in config.to_dict() and "length_penalty" not in config.to_dict()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_heads=7), "d_model=512 is not divisible by num_heads=7"),
        (
            dict(sinusoid_layout="sideways"),
            "sinusoid_layout must be one of 'interleaved', 'concatenated', got 'sideways'",
        ),
        (dict(position_encoding="rotary"), "position_encoding must be one of 'sinusoidal', 'learned', got 'rotary'"),
        (dict(dropout=-0.1), "dropout must be in [0, 1)"),
        (dict(attention_dropout=1.5), "attention_dropout must be in [0, 1)"),
        (dict(d_model=0), "d_model must be in [1, 65,536], got 0"),
        (dict(d_model=33, num_heads=3), "even d_model"),
        (dict(vocab_size=0), "vocab_size must be in [1, 16,777,216], got 0"),
    ],
)
def test_bad_settings_raise_a_clear_value_error(overrides, message):
    with pytest.raises(ValueError) as error:
        VaswaniConfig(**overrides)
    assert message in str(error.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(layer_norm_eps=float("nan")),
            "VaswaniConfig: layer_norm_eps must be a finite number in (0, 1], got nan",
        ),
        (dict(layer_norm_eps=0.0), "layer_norm_eps must be in (0, 1], got 0.0"),
        (dict(d_model=2**40), "d_model must be in [1, 65,536], got 1099511627776"),
        (dict(num_heads=True), "num_heads must be an integer in [1, 1024], got True (bool)"),
        (dict(dropout="0.1"), "dropout must be a number in [0, 1), got '0.1' (str)"),
        (dict(eos_token_id=37000), "eos_token_id must be a token id of the vocabulary, in [0, 36999], got 37000"),
    ],
)
def test_a_setting_is_checked_against_its_declaration_in_one_line(overrides, message):
    """Every field is declared with its type and range (MODEL_SETTINGS; tests/test_settings_properties.py tries them
    all): NaN, huge values and wrong types are a SettingError (a ValueError) naming the field, not a multi-line
    validation error or a model that allocates terabytes."""
    from vaswani_hf.configuration_vaswani import SettingError

    with pytest.raises(SettingError) as error:
        VaswaniConfig(**overrides)
    assert str(error.value) == message or message in str(error.value)
    assert "\n" not in str(error.value)


def test_d_k_given_explicitly_allows_indivisible_heads():
    config = VaswaniConfig(num_heads=7, d_k=64, d_v=64)
    assert config.d_k == 64


def test_a_value_is_checked_once_per_construction_and_again_before_saving(monkeypatch, tmp_path):
    """One check per entry: building a config checks each setting once (not once per wrapper), and saving checks the
    attributes again, so that an edited one cannot reach config.json."""
    import vaswani_hf.configuration_vaswani as hub_config
    from vaswani_hf.settings import MODEL_SETTINGS

    calls = []
    original = hub_config.check_setting
    monkeypatch.setattr(
        hub_config, "check_setting", lambda name, *a, **k: calls.append(name) or original(name, *a, **k)
    )
    config = VaswaniConfig(d_model=64, hidden_size=64)
    assert calls.count("d_model") == 1 and set(calls) == set(MODEL_SETTINGS)
    calls.clear()
    config.save_pretrained(tmp_path)
    assert calls.count("d_model") == 1


def test_a_near_miss_of_a_setting_is_kept_with_a_warning_as_other_unknown_keys_are(tmp_path, caplog):
    """VaswaniConfig(num_head=3) builds an 8-head model: a key this close to a setting is probably a typo, and the log
    says so; it is kept as transformers keeps any unknown key (a config.json of a newer version or of another tool
    must load). Keys transformers or other tools write (architectures, dtype, ...) are kept without a word, and
    config.json round-trips."""
    with caplog.at_level("WARNING"):
        config = VaswaniConfig(num_head=3)
    assert "'num_head' is no setting (kept as given); did you mean num_heads?" in caplog.text
    assert (config.num_heads, config.num_head) == (8, 3)
    caplog.clear()
    with caplog.at_level("WARNING"):
        config = VaswaniConfig(
            d_model=64, num_heads=4, my_note="kept", architectures=["VaswaniForConditionalGeneration"]
        )
    assert "did you mean" not in caplog.text
    config.save_pretrained(tmp_path)
    loaded = VaswaniConfig.from_pretrained(tmp_path)
    assert (loaded.num_heads, loaded.my_note, loaded.architectures) == (4, "kept", ["VaswaniForConditionalGeneration"])


def test_a_setting_given_twice_with_two_values_is_refused_not_silently_resolved():
    """d_model=64 with hidden_size=128 (transformers' generic name of it) would silently build a 128-wide model: one
    of the two values is a mistake, and the config names both. The same value twice, or one name alone, is fine."""
    with pytest.raises(SettingError, match=r"d_model=64 and hidden_size=128 name the same setting, d_model"):
        VaswaniConfig(d_model=64, hidden_size=128, num_heads=4)
    with pytest.raises(SettingError, match=r"encoder_layers=2 and num_hidden_layers=3 name the same setting"):
        VaswaniConfig(encoder_layers=2, num_hidden_layers=3)
    assert VaswaniConfig(d_model=128, hidden_size=128, num_heads=4).d_model == 128
    assert VaswaniConfig(hidden_size=128, num_heads=4).d_model == 128
