"""Check the names that a model card and an upload use (Hub repository ids and language codes) before any work.

Each kind of name has one rule here, and every entry that takes such a name applies it.
"""

from __future__ import annotations

import argparse
import re

from ..errors import UsageError

_LANGUAGE_CODE = re.compile(r"[A-Za-z0-9_-]{1,16}")


def repo_id_problem(repo_id: str) -> str | None:
    """Return why `repo_id` is not a valid Hub repository id, or None if it is valid.

    The reason is huggingface_hub's `validate_repo_id` message, joined onto one line. This is the one check behind
    every repository id the package takes (cards, uploads and Spaces).
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        return " ".join(str(error).split())
    return None


def check_card_identity(
    repo_id: str | None = None, source_lang: str | None = None, target_lang: str | None = None
) -> None:
    """Check the names a model card writes into its metadata and usage snippets, before any work.

    `repo_id` must be a valid Hub repository id (huggingface_hub's `validate_repo_id`), and each language code must be
    1-16 letters, digits, '-' or '_' (e.g. 'en', 'de', 'pt-BR'). A parameter left as None was not given and is not
    checked. Raises a UsageError naming the parameter that fails.
    """
    problem = None if repo_id is None else repo_id_problem(repo_id)
    if problem:
        raise UsageError(
            f"repo_id {repo_id!r} is not a Hub repository id ({problem}); give 'name' or 'namespace/name'"
        )
    for name, code in (("source_lang", source_lang), ("target_lang", target_lang)):
        try:
            code is None or language_code(code)
        except argparse.ArgumentTypeError as error:
            raise UsageError(f"{name} {error}") from None


def language_code(text: str) -> str:
    """Return `text` unchanged if it is a language code, and raise argparse.ArgumentTypeError otherwise.

    The rule is the one `check_card_identity` states (1-16 letters, digits, '-' or '_'). The function is meant as a
    command-line flag's `type=`, which is why it raises argparse's error rather than a UsageError.
    """
    if not isinstance(text, str) or not _LANGUAGE_CODE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a language code: 1-16 letters, digits, '-' or '_' (e.g. 'en', 'de')"
        )
    return text
