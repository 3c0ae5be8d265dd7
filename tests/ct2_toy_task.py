"""A toy translation task for the CTranslate2 export's tests: reverse a sequence of words, learned by a tiny model in a
few seconds, with a word-level tokenizer; and our model's outputs to compare an export with."""

import random

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

WORDS = [f"w{i}" for i in range(24)]
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def make_tokenizer(words=WORDS) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS[:20]) for _ in range(rng.randint(3, 9))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


def train_toy_model() -> tuple[VaswaniForConditionalGeneration, PreTrainedTokenizerFast, float]:
    """A tiny model trained for ~10 s of CPU to reverse sequences of words, its tokenizer and its last loss: outputs
    that depend on the input, which a random model (one repeated token) would not give."""
    torch.manual_seed(0)
    tokenizer = make_tokenizer()
    config = VaswaniConfig(
        vocab_size=len(SPECIALS) + len(WORDS),
        d_model=64,
        d_ff=128,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        sinusoid_layout="interleaved",
    )
    model = VaswaniForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    train = toy_pairs(6000, seed=1)
    model.train()
    for step in range(220):  # ~10 s of CPU
        batch = train[(step * 48) % len(train) :][:48]
        inputs = tokenizer([s for s, _ in batch], padding=True, return_tensors="pt")
        labels = tokenizer([t for _, t in batch], padding=True, return_tensors="pt")["input_ids"]
        labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)
        loss = model(**inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model, tokenizer, float(loss.detach())


def our_generate(model, tokenizer, sentences, **kwargs) -> list[str]:
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, **kwargs)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


def our_token_log_probs(model, tokenizer, source: str, target: str) -> np.ndarray:
    """log p(y_t | y_<t, x) of every target token, </s> included, from our model."""
    inputs = tokenizer([source], return_tensors="pt")
    labels = tokenizer([target], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        log_probs = model(**inputs, labels=labels).logits.float().log_softmax(-1)[0]
    return log_probs.gather(-1, labels[0][:, None])[:, 0].numpy()
