"""The data every system of the peer benchmark sees: the same sentence pairs, the same joint BPE, the same subwords.

Runs in this project's environment. One joint byte-level BPE is trained once with `vaswani_hf.tokenization` on the
training split (both sides), and every system gets it:
- ours: the tokenizer folder (`--tokenizer_path`), so our run skips its own BPE training;
- run_translation-style Seq2SeqTrainer + MarianMTModel: the same folder through `AutoTokenizer` (the same ids);
- eole: text files of space-separated subword pieces and a vocabulary file listing our pieces (eole adds its own
  four special tokens, so the vocabulary has the same 8,000 entries, in another order).
Hypotheses of every system are turned back into text by this tokenizer's decoder and scored by the same sacreBLEU
call (`score`), so no system gets a different detokenisation.

Corpora are read at run time from their folder (Multi30k: research-only licence; nothing is copied into the
repository): the benchmark's work folder gets its own copies.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

SRC, TGT = "en", "de"
MULTI30K_SPLITS = {"train": "train.lc.norm.tok", "valid": "val.lc.norm.tok"}
SMOKE_SPLITS = {"train": "train", "valid": "valid"}


@dataclass
class SharedData:
    """Paths (in the work folder) of what every system reads."""

    folder: str
    train: str  # prefix: PREFIX.en / PREFIX.de, raw text (a line a sentence)
    valid: str  # prefix, the validation split scored at every checkpoint
    bpe_dir: str  # tokenizer folder (tokenizer.json + tokenizer_config.json)
    train_pieces: str  # prefix of the space-separated subword pieces (eole)
    valid_pieces: str
    piece_vocab: str  # one piece a line, our special tokens left out (eole adds its own)
    vocab_size: int
    train_pairs: int
    valid_pairs: int
    mean_target_tokens: float  # BPE tokens of a training target, </s> included

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> SharedData:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def corpus_source(smoke: bool, multi30k_dir: Path) -> tuple[Path, dict[str, str]]:
    """(folder, split -> file prefix) of the corpus: the bundled sample corpus in smoke mode, else Multi30k's
    lowercased tokenized files (what the multi30k-en-de recipe trains on)."""
    if smoke:
        from vaswani_hf.data.corpora import sample_corpus_path

        return Path(sample_corpus_path()), SMOKE_SPLITS
    return multi30k_dir / "tok", MULTI30K_SPLITS


def missing_corpus_files(folder: Path, splits: dict[str, str]) -> list[str]:
    return [
        str(folder / f"{prefix}.{lang}")
        for prefix in splits.values()
        for lang in (SRC, TGT)
        if not (folder / f"{prefix}.{lang}").is_file()
    ]


def prepare(work: Path, folder: Path, splits: dict[str, str], vocab_size: int, max_valid_pairs: int = 0) -> SharedData:
    """Copy the splits into `work/data` (the first `max_valid_pairs` validation pairs, if > 0), train the joint BPE
    there and write the pieces files; reused when a previous call with the same settings left
    `work/data/shared.json`."""
    from vaswani_hf.io import read_lines
    from vaswani_hf.tokenization import train_bpe_tokenizer

    data = work / "data"
    record = data / "shared.json"
    settings = {"source": str(folder), "splits": splits, "vocab_size": vocab_size, "max_valid_pairs": max_valid_pairs}
    if (
        record.is_file()
        and (data / "settings.json").is_file()
        and json.loads((data / "settings.json").read_text()) == settings
    ):
        return SharedData.load(record)
    if data.exists():
        if not (data / "settings.json").is_file():
            from vaswani_hf.io import UsageError

            raise UsageError(
                f"{data} exists and was not made by the peer benchmark (no settings.json): move it, or "
                "choose another --work_dir"
            )
        shutil.rmtree(data)  # the benchmark's own folder, from a run with other settings
    data.mkdir(parents=True)
    pairs = {}
    for split, prefix in splits.items():
        lines = {lang: read_lines(folder / f"{prefix}.{lang}") for lang in (SRC, TGT)}
        if split == "valid" and max_valid_pairs > 0:
            lines = {lang: side[:max_valid_pairs] for lang, side in lines.items()}
        for lang, side in lines.items():
            (data / f"{split}.{lang}").write_text("".join(s + "\n" for s in side), encoding="utf-8")
        pairs[split] = len(lines[SRC])
    tokenizer = train_bpe_tokenizer(
        [data / f"train.{SRC}", data / f"train.{TGT}"],
        vocab_size=vocab_size,
        min_frequency=2,
        save_dir=data / "bpe",
        show_progress=False,
    )
    backend = tokenizer.backend_tokenizer
    target_tokens = 0
    for split in splits:
        for lang in (SRC, TGT):
            encoded = backend.encode_batch(read_lines(data / f"{split}.{lang}"), add_special_tokens=False)
            (data / f"{split}.pieces.{lang}").write_text(
                "".join(" ".join(e.tokens) + "\n" for e in encoded), encoding="utf-8"
            )
            if split == "train" and lang == TGT:
                target_tokens = sum(len(e.ids) + 1 for e in encoded)  # + </s>
    pieces = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    special = set(tokenizer.all_special_tokens)
    (data / "pieces.vocab").write_text("".join(p + "\n" for p, _ in pieces if p not in special), encoding="utf-8")
    shared = SharedData(
        folder=str(data),
        train=str(data / "train"),
        valid=str(data / "valid"),
        bpe_dir=str(data / "bpe"),
        train_pieces=str(data / "train.pieces"),
        valid_pieces=str(data / "valid.pieces"),
        piece_vocab=str(data / "pieces.vocab"),
        vocab_size=len(tokenizer),
        train_pairs=pairs["train"],
        valid_pairs=pairs["valid"],
        mean_target_tokens=target_tokens / max(1, pairs["train"]),
    )
    shared.save(record)
    (data / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    return shared


def pieces_to_text(lines: list[str], bpe_dir: str) -> list[str]:
    """eole's output (space-separated pieces) -> text, through our tokenizer's decoder (pieces it does not know,
    e.g. eole's <unk>, are dropped)."""
    from vaswani_hf.tokenization import load_tokenizer

    tokenizer = load_tokenizer(bpe_dir)
    vocab = tokenizer.get_vocab()
    ids = [[vocab[p] for p in line.split() if p in vocab] for line in lines]
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def score(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU of tokenized lowercased text: sacreBLEU with tokenize='none' (the multi30k recipe's bleu_tokenize,
    fairseq's way of scoring Multi30k), for every system the same."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return sacrebleu.BLEU(tokenize="none", force=True).corpus_score(hypotheses, [references]).score
