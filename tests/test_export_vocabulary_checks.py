"""A CTranslate2 export and the Marian export refuse what would translate garbage or write a wrong card, before any
work, in one line naming the file or parameter: tokenizer files replaced by another vocabulary of the same size
(the export's shared_vocabulary.json shows it), an explicit tokenizer that is not the model folder's own, a
vaswani_ctranslate2.json whose recorded decoding options break their declarations, an invalid repo id or language
code for the card."""

import json
import shutil

import pytest

pytest.importorskip("ctranslate2")


from vaswani_hf.export.ctranslate2 import CTranslate2Translator  # noqa: E402
from vaswani_hf.export.ctranslate2_spec import to_ctranslate2  # noqa: E402
from vaswani_hf.export.marian import export_marian  # noqa: E402
from vaswani_hf.io import UsageError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _swap_two_tokens(folder):
    """The tokenizer.json of `folder` with two ordinary tokens' ids swapped: same size, another vocabulary."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    specials = {token["content"] for token in data.get("added_tokens", [])}
    a, b = [token for token in vocab if token not in specials][-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    path.write_text(json.dumps(data), encoding="utf-8")
    return a, b


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):  # noqa: F811
    return to_ctranslate2(tiny["folder"], tmp_path_factory.mktemp("ct2") / "out")


def test_export_loads_with_its_own_tokenizer(exported):
    assert CTranslate2Translator(exported).translate(["a b"], num_beams=1, max_new_tokens=3) is not None


def test_replaced_same_size_tokenizer_is_refused_naming_both_files(exported, tmp_path):
    folder = tmp_path / "swapped"
    shutil.copytree(exported, folder)
    _swap_two_tokens(folder)
    with pytest.raises(UsageError) as error:
        CTranslate2Translator(folder)
    message = str(error.value)
    assert "tokenizer.json" in message and "shared_vocabulary.json" in message and "\n" not in message


@pytest.mark.parametrize("value", ["four", 0, 2.5, True])
def test_bad_generation_option_in_metadata_is_refused_naming_file_and_field(exported, tmp_path, value):
    folder = tmp_path / "meta"
    shutil.copytree(exported, folder)
    path = folder / "vaswani_ctranslate2.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata["generation"]["num_beams"] = value
    path.write_text(json.dumps(metadata), encoding="utf-8")
    with pytest.raises(UsageError) as error:
        CTranslate2Translator(folder)
    assert "vaswani_ctranslate2.json" in str(error.value) and "num_beams" in str(error.value)


def test_explicit_tokenizer_of_another_vocabulary_is_refused(tiny, tmp_path):  # noqa: F811
    other = tmp_path / "tok"
    other.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny["folder"] / name, other / name)
    out = tmp_path / "ct2"
    to_ctranslate2(tiny["folder"], out, tokenizer=other)  # a copy of the model's own: accepted
    a, b = _swap_two_tokens(other)
    with pytest.raises(UsageError) as error:
        to_ctranslate2(tiny["folder"], tmp_path / "ct2_other", tokenizer=other)
    assert "not one vocabulary" in str(error.value) and str(other) in str(error.value)
    assert not (tmp_path / "ct2_other").exists()


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(repo_id="bad id!!"), "repo_id"),
        (dict(training_info={"source_lang": "e n", "target_lang": "de"}), "source_lang"),
        (dict(training_info={"source_lang": "en", "target_lang": "de\nx"}), "target_lang"),
    ],
)
def test_marian_export_refuses_bad_card_identity(tiny, tmp_path, kwargs, named):  # noqa: F811
    out = tmp_path / "marian"
    with pytest.raises(UsageError) as error:
        export_marian(tiny["folder"], out, **kwargs)
    assert str(error.value).startswith(named) and "\n" not in str(error.value)
    assert not out.exists()
