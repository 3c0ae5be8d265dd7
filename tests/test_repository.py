"""Guards on the repository itself: Multi30k (research-only licence) is read at run time, never committed."""

import re
import subprocess

import pytest
from conftest import MULTI30K, REPO


def tracked_text_files():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for name in listed.stdout.split():
        path = REPO / name
        try:
            yield name, path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue


def test_no_multi30k_sentence_is_committed():
    files = [p for p in MULTI30K.rglob("*") if p.is_file()] if MULTI30K.is_dir() else []
    if not files:
        pytest.skip(f"Multi30k not found at {MULTI30K}")
    corpus = set()
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip().lower()
            if len(line.split()) >= 4:  # short phrases ("a dog runs .") may coincide by chance
                corpus.add(line)
    quoted = re.compile(r"\"([^\"\n]{12,})\"|'([^'\n]{12,})'")
    found = []
    for name, text in tracked_text_files():
        for number, line in enumerate(text.splitlines(), 1):
            candidates = [line.strip().lower()] + [(a or b).strip().lower() for a, b in quoted.findall(line)]
            if any(candidate in corpus for candidate in candidates):
                found.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not found, "Multi30k text in tracked files:\n" + "\n".join(found)
