"""vaswani_hf.training.recipe: recipe YAML read with bounded work, one value per key, a mapping at the top."""

from __future__ import annotations

import pytest

from vaswani_hf.io import UsageError
from vaswani_hf.training.recipe import MAX_RECIPE_BYTES, RecipeError, load_recipe, read_yaml_mapping, read_yaml_text


def _recipe(tmp_path, text: str):
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "text, key, lines",
    [
        ("max_steps: 10\nwarmup_steps: 4\nmax_steps: 20\n", "'max_steps'", (3, 1)),
        ("a: 1\n\n\n\na: 1\n", "'a'", (5, 1)),  # the same value twice is still a key given twice
        ("outer:\n  x: 1\n  x: 2\n", "'x'", (3, 2)),  # nested mappings too
        ("{a: 1, b: 2, a: 3}\n", "'a'", (1, 1)),  # flow style, one line
        ("1: a\n1: b\n", "1", (2, 1)),
    ],
)
def test_a_key_given_twice_is_refused_naming_the_key_and_both_lines(tmp_path, text, key, lines):
    path = _recipe(tmp_path, text)
    with pytest.raises(UsageError) as error:
        read_yaml_mapping(path, UsageError)
    message = str(error.value)
    assert message.startswith(
        f"{path}: invalid YAML: line {lines[0]}: key {key} is given twice (first on line {lines[1]})"
    ), message
    assert "\n" not in message


def test_load_recipe_refuses_a_key_given_twice(tmp_path):
    """The last value does not win silently through the one recipe loader either."""
    path = _recipe(tmp_path, "max_steps: 10\nmax_steps: 20\n")
    with pytest.raises(RecipeError, match=r"r\.yaml: invalid YAML: line 2: key 'max_steps' is given twice"):
        load_recipe(path)


@pytest.mark.parametrize("text, got", [("- a\n- b\n", "list"), ("just text\n", "str"), ("3\n", "int")])
def test_a_recipe_is_a_mapping(tmp_path, text, got):
    path = _recipe(tmp_path, text)
    with pytest.raises(UsageError, match=rf"r\.yaml: a recipe is a mapping of keys to values, got {got}$"):
        read_yaml_mapping(path, UsageError)


@pytest.mark.parametrize("text", ["", "\n  \n", "# nothing\n", "---\n", "null\n", "{}\n", "--- # a comment\n...\n"])
def test_an_empty_recipe_is_refused_naming_the_file(tmp_path, text):
    """An empty file would silently train the code defaults (100k updates into outputs/run): refused in one line that
    names the file and the bundled default recipe, through the one recipe loader too."""
    path = _recipe(tmp_path, text)
    for read in (lambda: read_yaml_mapping(path, UsageError), lambda: load_recipe(path)):
        with pytest.raises(UsageError) as error:
            read()
        message = str(error.value)
        assert message.startswith(f"{path} is empty (no keys); a recipe needs at least one key"), message
        assert "--recipe default" in message and "\n" not in message


def test_a_recipe_with_one_key_is_not_empty(tmp_path):
    assert read_yaml_mapping(_recipe(tmp_path, "# the tiny model\nmax_steps: 10\n"), UsageError) == {"max_steps": 10}


def test_aliases_are_refused(tmp_path):
    path = _recipe(tmp_path, "a: &x [1, 2]\nb: *x\n")
    with pytest.raises(UsageError, match=r"line 2: YAML aliases \(\*x\) are not allowed"):
        read_yaml_mapping(path, UsageError)


def test_files_larger_than_a_recipe_and_bad_bytes_are_named(tmp_path):
    big = _recipe(tmp_path, "a: 1\n" + "#" * MAX_RECIPE_BYTES)
    with pytest.raises(UsageError, match=r"r\.yaml: .* bytes is not a recipe"):
        read_yaml_mapping(big, UsageError)
    big.write_bytes(b"a: \xff\n")
    with pytest.raises(UsageError, match=r"r\.yaml: not UTF-8 text"):
        read_yaml_mapping(big, UsageError)
    with pytest.raises(UsageError, match=r"recipe .*absent\.yaml: "):
        read_yaml_mapping(tmp_path / "absent.yaml", UsageError)


def test_read_yaml_text_names_where_the_text_came_from():
    assert read_yaml_text("[1, 2]", "--sizes") == [1, 2]
    with pytest.raises(ValueError, match=r"^--sizes: invalid YAML: "):
        read_yaml_text("[1, 2", "--sizes")
    with pytest.raises(UsageError, match=r"^--x: invalid YAML: line 1: key 'a' is given twice"):
        read_yaml_text("{a: 1, a: 2}", "--x", UsageError)
