"""What a card and an upload name: Hub repository ids and language codes, checked before any work, one rule each."""

from __future__ import annotations

import argparse
import re

from ..errors import UsageError

_LANGUAGE_CODE = re.compile(r"[A-Za-z0-9_-]{1,16}")


def repo_id_problem(repo_id: str) -> str | None:
    """Why `repo_id` is not a Hub repository id (huggingface_hub's `validate_repo_id`, its message on one line), or
    None: the one check behind every repository id the package takes (cards, uploads, Spaces)."""
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
    """What a card writes into its metadata and usage snippets, checked before any work: `repo_id` a valid Hub id
    (huggingface_hub's `validate_repo_id`), the language codes letters, digits, '-' or '_' (1-16 characters, e.g.
    'en', 'de', 'pt-BR'). UsageError naming the parameter (None: not given, not checked)."""
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
    """`text` if it is a language code (the rule of `check_card_identity`), for a flag's `type=`."""
    if not isinstance(text, str) or not _LANGUAGE_CODE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a language code: 1-16 letters, digits, '-' or '_' (e.g. 'en', 'de')"
        )
    return text
