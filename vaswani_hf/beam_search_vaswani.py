"""Decode with the Transformer's decoder in lean loops (Section 6.1), which
`VaswaniForConditionalGeneration.generate()` (generation_vaswani.py) runs in place of transformers' generic
`_beam_search` and greedy `_sample` where they carry out the whole request (`lean_loop_can_run` there, from the
settings they implement, `LEAN_SETTINGS`); every other request runs transformers' loop.

They compute what transformers' loops compute -- for beam search the same candidates (top 2k of k beams x V tokens),
the same rule for which hypotheses finish and which beams go on, the same length-normalised scores; for greedy the
same argmax -- so their translations are those of the generic loops (tests/test_beam_search.py checks this). They
are hand-written for the work they leave out:

- sentences leave the batch as soon as their result is final (transformers keeps computing every sentence until the
  last one is done, so a batch costs as much as its longest translation);
- at the first step the k beams of a sentence have the same prefix: one row is computed instead of k;
- a decoder step runs each layer's own `VaswaniDecoderLayer.sublayers` (the structure `forward` runs) with attention
  done here, without output dataclasses, mask builders, cache objects or logits-processor plumbing per step: the
  source K/V are projected once per sentence, a sentence's beams query them together, and the self-attention K/V
  live in two preallocated buffers, so reordering beams is one copy per step instead of transformers' copy +
  concatenation;
- sequence bookkeeping touches only the generated prefix, not a (batch, 2k, max_length) tensor per step.

Shapes name A the sentences still running, k the beams, rows = A * k (A at the first step), V the vocabulary, H heads.
This file is copied next to the weights with the modeling files (a relative import), so it imports only torch.
"""

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial

import torch
from torch import nn

# ---------------------------------------------------------------------------------------------------------------------
# One decoder step (Section 3.1) over the loops' own K/V storage
# ---------------------------------------------------------------------------------------------------------------------


class _SelfAttentionBuffers:
    """Hold one decoder layer's self-attention keys and values for every running row, stored (rows, capacity, H, d) so
    that a row's prefix is one contiguous block; attention reads them as the (rows, H, length, d) views SDPA expects.
    Each tensor has two buffers: `reorder` copies the kept rows' prefixes from one into the other with
    `index_select(out=...)`, one block per row (with heads before positions each row would be H blocks, and the copy
    about 1.6 times slower). The capacity starts small and doubles, up to `max_positions`, as the prefix grows."""

    def __init__(self, rows: int, heads: int, d_k: int, d_v: int, max_positions: int, dtype, device):
        self.max_positions = max_positions
        capacity = min(max_positions, 32)
        self.keys = [torch.empty(rows, capacity, heads, d_k, dtype=dtype, device=device) for _ in range(2)]
        self.values = [torch.empty(rows, capacity, heads, d_v, dtype=dtype, device=device) for _ in range(2)]
        self.current = 0

    def _grow(self, length: int):
        keys, values = self.keys[self.current], self.values[self.current]
        rows, capacity, heads, d_k = keys.shape
        capacity = min(self.max_positions, 2 * capacity)
        self.keys = [keys.new_empty(rows, capacity, heads, d_k) for _ in range(2)]
        self.values = [values.new_empty(rows, capacity, heads, values.shape[-1]) for _ in range(2)]
        self.current = 0
        self.keys[0][:, :length], self.values[0][:, :length] = keys[:, :length], values[:, :length]

    def append(self, rows: int, position: int, key: torch.Tensor, value: torch.Tensor):
        """Write one position's (rows, H, d) key and value; return the (rows, H, position + 1, d) prefixes."""
        if position >= self.keys[self.current].shape[1]:
            self._grow(position)
        keys, values = self.keys[self.current], self.values[self.current]
        keys[:rows, position], values[:rows, position] = key, value
        return keys[:rows, : position + 1].transpose(1, 2), values[:rows, : position + 1].transpose(1, 2)

    def reorder(self, rows: int, length: int, source_rows: torch.Tensor):
        """Reorder the rows so that row r of the next step is row `source_rows[r]` of this one (beams, sentences)."""
        nxt, new_rows = 1 - self.current, source_rows.shape[0]
        for both in (self.keys, self.values):
            torch.index_select(both[self.current][:rows, :length], 0, source_rows, out=both[nxt][:new_rows, :length])
        self.current = nxt


def _buffers(model, rows: int, max_positions: int, dtype, device) -> list[_SelfAttentionBuffers]:
    config = model.config
    return [
        _SelfAttentionBuffers(rows, config.num_heads, config.d_k, config.d_v, max_positions, dtype, device)
        for _ in model.get_decoder().layers
    ]


@dataclass
class _Source:
    """Hold every decoder layer's (A, H, S, d) source keys and values, projected once per sentence, and the additive
    (A, 1, 1, S) padding mask, or None when nothing is padded."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor | None

    def select(self, kept: torch.Tensor) -> "_Source":
        """Return the sentences still running, whose current indices are `kept`."""
        return _Source(
            [x[kept] for x in self.keys],
            [x[kept] for x in self.values],
            self.mask[kept] if self.mask is not None else None,
        )


def project_source(model, encoder_hidden_states: torch.Tensor, encoder_attention_mask: torch.Tensor | None) -> _Source:
    """Project every decoder layer's source K/V (3.2.3) from the (A, S, D) encoder output, with the padding mask."""
    dtype = encoder_hidden_states.dtype
    layers = model.get_decoder().layers
    keys = [layer.encoder_attn.keys(encoder_hidden_states).transpose(1, 2) for layer in layers]  # (A, H, S, d_k)
    values = [layer.encoder_attn.values(encoder_hidden_states).transpose(1, 2) for layer in layers]  # (A, H, S, d_v)
    mask = None
    if encoder_attention_mask is not None and not bool(encoder_attention_mask.bool().all()):
        batch, length = encoder_attention_mask.shape
        mask = torch.zeros(batch, 1, 1, length, dtype=dtype, device=encoder_hidden_states.device)
        mask.masked_fill_(~encoder_attention_mask.bool()[:, None, None, :], torch.finfo(dtype).min)
    return _Source(keys, values, mask)


def _attend(query, keys, values, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Compute Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (Eq. 1) for one step: (N, H, q, d) queries attend
    over (N, H, L, d) keys and values, with an additive `mask`. This is SDPA, except for bf16 and fp16 on a CPU, where
    SDPA's flash kernel runs one small product per (row, head) and measured 2-3x slower than fp32 and than two batched
    bf16 products at these shapes (one query per row over a strided K/V buffer). So reduced precision on a CPU takes
    two batched products with the softmax in fp32, in the order of the model's `eager_attention_forward`."""
    if query.dtype == torch.float32 or query.device.type != "cpu":
        return nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale)
    scores = torch.matmul(query, keys.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask
    return torch.matmul(nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype), values)


def _self_attention(attn, hidden: torch.Tensor, buffer: _SelfAttentionBuffers, step: int) -> torch.Tensor:
    """Return the (rows, D) masked self-attention (3.2.3) of the new position: its key and value join the row's
    earlier ones in `buffer`, and its query attends to all step + 1 of them (no later position exists: no mask)."""
    keys, values = buffer.append(hidden.shape[0], step, attn.keys(hidden), attn.values(hidden))  # (rows, H, step+1, d)
    query = attn.queries(hidden).unsqueeze(2)  # (rows, H, 1, d_k)
    out = _attend(query, keys, values, None, attn.scaling)  # (rows, H, 1, d_v)
    return attn.output(out.squeeze(2))  # (rows, D)


def _cross_attention(
    attn, hidden: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None, group: int
) -> torch.Tensor:
    """Return the encoder-decoder attention (3.2.3) of the decoder's rows (each a beam), shape (rows, D). A sentence's
    `group` beams lie in consecutive rows and share its projected source keys and values, shape (A, H, S, d)."""
    rows, heads = hidden.shape[0], attn.num_heads
    query = attn.queries(hidden).view(rows // group, group, heads, attn.d_k).transpose(1, 2)  # (A, H, group, d_k)
    out = _attend(query, keys, values, mask, attn.scaling)  # (A, H, group, d_v)
    return attn.output(out.transpose(1, 2).reshape(rows, heads, attn.d_v))  # (rows, D)


def decoder_step(
    model, tokens: torch.Tensor, step: int, buffers: list[_SelfAttentionBuffers], source: _Source, group: int
) -> torch.Tensor:
    """Run one decoder position for every running row (Section 3.1; the model is in eval mode, so dropout is off),
    returning the (rows, D) final hidden states for the (rows,) last tokens. The embedding and every layer are the
    model's own (`VaswaniStack.embed`, `VaswaniDecoderLayer.sublayers`); only how attention reads its keys and values
    is done here, on (rows, D) states (one position: no sequence dimension). Rows are sentences x `group` beams."""
    decoder = model.get_decoder()
    hidden = decoder.embed(tokens[:, None], None, step)[0][:, 0]  # (rows, D) at position `step`
    for layer, buffer, keys, values in zip(decoder.layers, buffers, source.keys, source.values):
        hidden = layer.sublayers(
            hidden,
            partial(_self_attention, buffer=buffer, step=step),
            partial(_cross_attention, keys=keys, values=values, mask=source.mask, group=group),
        )
    return hidden


# ---------------------------------------------------------------------------------------------------------------------
# Candidate scores: the length limit, min_length, and the top 2k
# ---------------------------------------------------------------------------------------------------------------------


def force_eos(scores: torch.Tensor, rows: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """Return the (N, V) scores with the rows where `rows` (N,) is True set to 0 for </s> and -inf elsewhere, so that
    those rows can only end. `SourceLengthLimitLogitsProcessor` and both loops use it for the per-sentence limit."""
    forced = torch.full_like(scores[0], -float("inf"))
    forced[eos_token_id] = 0.0
    return torch.where(rows.unsqueeze(-1), forced, scores)


def _restrict(
    scores: torch.Tensor, step: int, min_steps: int, at_limit: torch.Tensor | None, eos_token_id: int
) -> torch.Tensor:
    """Do to the (rows, V) scores what transformers' processors would: forbid </s> before `min_steps` tokens
    (MinLength / MinNewTokensLength, in place), and let rows at their sentence's length limit emit only </s>
    (`SourceLengthLimitLogitsProcessor`'s rule)."""
    if step < min_steps:
        scores[:, eos_token_id] = -float("inf")
    if at_limit is not None and bool(at_limit.any()):
        scores = force_eos(scores, at_limit, eos_token_id)
    return scores


def top_candidates(log_probs: torch.Tensor, running_scores: torch.Tensor, keep: int, chunk: int = 128):
    """Return the `keep` best (beam, token) candidates of each sentence by accumulated log P, as
    `torch.topk((log_probs + running_scores[..., None]).view(A, k * V), keep)` gives them (values, and flat indices
    beam * V + token; equal up to the order of exact ties), without adding the beam scores to all k * V log-probs.

    `log_probs` is (A, k, V) and `running_scores` (A, k). Rounding is monotone, so the best sum in a block of `chunk`
    tokens is the block's best log-prob plus the beam's score; the `keep` best sums lie in the `keep` best blocks or in
    each row's < `chunk` leftover tokens, and only those are summed and ranked. Off CPU, or with fewer than `keep`
    blocks per row, it is the plain sum and `torch.topk`."""
    alive, k, vocab = log_probs.shape
    blocks = vocab // chunk
    if blocks < keep or log_probs.device.type != "cpu":
        return torch.topk((log_probs + running_scores[:, :, None]).reshape(alive, k * vocab), keep)
    device = log_probs.device
    main = log_probs[:, :, : blocks * chunk].unflatten(-1, (blocks, chunk))  # (A, k, blocks, chunk), a view
    block_best = (main.amax(-1) + running_scores[:, :, None]).view(alive, k * blocks)
    top_blocks = torch.topk(block_best, keep).indices  # (A, keep)
    beams, block = top_blocks // blocks, top_blocks % blocks
    values = main[torch.arange(alive, device=device)[:, None], beams, block]  # (A, keep, chunk)
    values = (values + running_scores.gather(1, beams)[:, :, None]).view(alive, keep * chunk)
    offsets = ((beams * vocab + block * chunk)[:, :, None] + torch.arange(chunk, device=device)).view(alive, -1)
    if blocks * chunk < vocab:  # Add each beam's tokens after its last full block.
        tail = (log_probs[:, :, blocks * chunk :] + running_scores[:, :, None]).reshape(alive, -1)
        tail_offsets = (
            torch.arange(k, device=device)[:, None] * vocab + torch.arange(blocks * chunk, vocab, device=device)
        ).view(1, -1)
        values = torch.cat([values, tail], dim=1)
        offsets = torch.cat([offsets, tail_offsets.expand(alive, -1)], dim=1)
    top, picked = torch.topk(values, keep)
    return top, offsets.gather(1, picked)


# ---------------------------------------------------------------------------------------------------------------------
# Beam search: per-sentence state and the steps of transformers' `_beam_search`
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _Beams:
    """Hold beam search's state for the A sentences still running (`ids`: their places in the batch), each with k
    beams of at most `max_new` tokens, and their finished hypotheses, best first by log P / length_penalty(|Y|)."""

    ids: torch.Tensor  # (A,)
    running_scores: torch.Tensor  # (A, k): each beam's accumulated log P
    running_tokens: torch.Tensor  # (A, k, max_new)
    finished_scores: torch.Tensor  # (A, k)
    finished_tokens: torch.Tensor  # (A, k, max_new)
    finished_lengths: torch.Tensor  # (A, k)
    finished_flags: torch.Tensor  # (A, k): True for a real hypothesis, not a -1e9 placeholder
    can_improve: torch.Tensor  # (A,): True while a running beam may beat the worst finished one
    source: _Source

    @classmethod
    def start(cls, batch: int, k: int, max_new: int, fill_value: int, source: _Source, device) -> "_Beams":
        running_scores = torch.full((batch, k), -1.0e9, device=device)
        running_scores[:, 0] = 0.0  # All beams start identical, so only the first may expand at step 1.
        return cls(
            ids=torch.arange(batch, device=device),
            running_scores=running_scores,
            running_tokens=torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device),
            finished_scores=torch.full((batch, k), -1.0e9, device=device),
            finished_tokens=torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device),
            finished_lengths=torch.zeros(batch, k, dtype=torch.long, device=device),
            finished_flags=torch.zeros(batch, k, dtype=torch.bool, device=device),
            can_improve=torch.ones(batch, dtype=torch.bool, device=device),
            source=source,
        )

    def select(self, kept: torch.Tensor) -> "_Beams":
        """Return the sentences still running, whose current indices are `kept`."""
        return _Beams(
            **{f.name: getattr(self, f.name)[kept] for f in fields(self) if f.name != "source"},
            source=self.source.select(kept),
        )


def _candidates(log_probs: torch.Tensor, beams: _Beams, group: int, keep: int, step: int):
    """Return each sentence's `keep` = 2k best (beam, token) candidates by accumulated log P (step 2 of
    `lean_beam_search`). Their scores, beams of origin and new tokens come as (A, 2k) tensors, and their token
    sequences as (A, 2k, step + 1)."""
    alive, k = beams.running_scores.shape
    vocab = log_probs.shape[-1]
    log_probs = log_probs.view(alive, group, vocab).expand(alive, k, vocab)  # With group 1, the k beams are identical.
    top_scores, top_indices = top_candidates(log_probs, beams.running_scores, keep)  # (A, 2k)
    origins, new_tokens = top_indices // vocab, top_indices % vocab
    prefixes = beams.running_tokens[:, :, :step].gather(1, origins[:, :, None].expand(alive, keep, step))
    return top_scores, origins, new_tokens, torch.cat([prefixes, new_tokens[:, :, None]], dim=2)


def _add_finished(
    beams: _Beams,
    top_scores,
    candidates,
    just_finished,
    step: int,
    length_penalty: Callable,
    early_stopping,
    fill_value: int,
):
    """Merge those of the k best candidates that finished now, scored log P / lp(|Y|), into each sentence's k best
    finished hypotheses (step 4 of `lean_beam_search`), unless it cannot improve or has k and early_stopping=True."""
    alive, keep, _ = candidates.shape
    k, max_new = beams.finished_tokens.shape[1:]
    normalised = top_scores / length_penalty(step + 1)
    if early_stopping is True:
        normalised = normalised + beams.finished_flags.all(1, keepdim=True).float() * -1.0e9
    normalised = normalised + (~beams.can_improve)[:, None].float() * -1.0e9
    normalised = normalised + (~just_finished) * -1.0e9
    merged_scores = torch.cat([beams.finished_scores, normalised], dim=1)  # (A, 3k)
    best = torch.topk(merged_scores, k).indices
    beams.finished_scores = merged_scores.gather(1, best)
    beams.finished_flags = torch.cat([beams.finished_flags, just_finished], dim=1).gather(1, best)
    padded = torch.full((alive, keep, max_new), fill_value, dtype=torch.long, device=candidates.device)
    padded[:, :, : step + 1] = candidates
    beams.finished_tokens = torch.cat([beams.finished_tokens, padded], dim=1).gather(
        1, best[:, :, None].expand(alive, k, max_new)
    )
    lengths = torch.full((alive, keep), step + 1, dtype=torch.long, device=candidates.device)
    beams.finished_lengths = torch.cat([beams.finished_lengths, lengths], dim=1).gather(1, best)


def _run_on(beams: _Beams, top_scores, hits, candidates, origins, group: int, step: int) -> torch.Tensor:
    """Make the k best candidates that did not finish the running beams (step 3 of `lean_beam_search`). Return, as
    (A, k), the row of this step that each of them continues, for reordering the self-attention buffers."""
    alive, k = beams.running_scores.shape
    running_all = top_scores + hits.float() * -1.0e9
    chosen = torch.topk(running_all, k).indices  # (A, k)
    beams.running_scores = running_all.gather(1, chosen)
    beams.running_tokens[:, :, : step + 1] = candidates.gather(1, chosen[:, :, None].expand(alive, k, step + 1))
    source_rows = origins.gather(1, chosen) if group > 1 else torch.zeros_like(chosen)
    return source_rows + torch.arange(alive, device=chosen.device)[:, None] * group


def _sentences_done(
    beams: _Beams,
    step: int,
    length_bounds,
    length_penalty: Callable,
    alpha: float,
    early_stopping,
    num_return_sequences: int,
    max_length: int,
) -> torch.Tensor:
    """Update `beams.can_improve`, and return (A,) True where a sentence's result is final (lean_beam_search's step 5).
    A beam's log P only falls as it grows, and for alpha > 0 lp(|Y|) grows with it, so its best reachable score is log
    P / lp(longest |Y| of its sentence). `early_stopping="never"` (the paper's t2t bound) compares that with the worst
    finished hypothesis, False uses the current length (transformers' heuristic), and True also stops once k end."""
    current_length = torch.full_like(beams.ids, step + 1)
    exact_bound = beams.running_scores[:, 0] / length_penalty(
        (length_bounds[beams.ids] if alpha > 0.0 else current_length).float()
    )
    best_possible = (
        exact_bound
        if early_stopping == "never"
        else beams.running_scores[:, 0] / length_penalty(current_length.float())
    )
    worst_finished = torch.where(beams.finished_flags, beams.finished_scores.min(1, keepdim=True).values, -1.0e9)
    beams.can_improve = beams.can_improve & (best_possible[:, None] > worst_finished).any(1)
    done = ~beams.can_improve
    # The n hypotheses returned are final once no running beam can beat the n-th best finished one even at its
    # longest: only hypotheses that score below it could still finish, and they cannot enter the n best, so the
    # result is transformers' (whose loop goes on until k have finished) with fewer steps. The 1e-6 slack keeps
    # float rounding of lp from ever stopping a sentence that could still change.
    n = num_return_sequences
    upper_bound = exact_bound + exact_bound.abs() * 1.0e-6
    done = done | (beams.finished_flags[:, n - 1] & (upper_bound < beams.finished_scores[:, n - 1]))
    if early_stopping is True:
        done = done | beams.finished_flags.all(1)
    return done | (step + 2 >= max_length)


def _sequences(
    tokens: torch.Tensor, lengths: torch.Tensor, decoder_start_ids: torch.Tensor, n: int, fill_value: int
) -> torch.Tensor:
    """Return (B * n, 1 + longest) ids: each sentence's n best hypotheses from the (B, >= n, max_new) `tokens`, best
    first, each after the start token and padded with `fill_value` to the longest of their `lengths`."""
    batch = tokens.shape[0]
    longest = int(lengths[:, :n].max()) if batch else 0
    sequences = torch.full((batch * n, 1 + longest), fill_value, dtype=torch.long, device=tokens.device)
    sequences[:, 0] = decoder_start_ids.to(tokens.device).repeat_interleave(n)
    sequences[:, 1:] = tokens[:, :n, :longest].reshape(batch * n, longest)
    return sequences


@torch.no_grad()
def lean_beam_search(
    model: nn.Module,
    encoder_hidden_states: torch.Tensor,  # (B, S, D): one copy per sentence
    encoder_attention_mask: torch.Tensor | None,  # (B, S), 1 for a real token
    decoder_start_ids: torch.Tensor,  # (B,)
    *,
    num_beams: int,
    num_return_sequences: int,
    limits: torch.Tensor | None,  # (B,) tokens each sentence may generate, </s> included, or None
    max_length: int,  # transformers' global max_length, start token included
    eos_token_id: int,
    fill_value: int,
    min_steps: int = 0,  # </s> is forbidden before this many tokens (min_length / min_new_tokens)
    length_penalty: Callable,  # It maps a length (int or tensor) to log P's divisor.
    alpha: float,
    early_stopping: bool | str,
) -> torch.Tensor:
    """Run beam search over `model`'s decoder (a VaswaniForConditionalGeneration in eval mode), step by step for each
    running sentence as transformers' `GenerationMixin._beam_search` (v5) does. (1) Each beam scores every next token
    by log P; a beam at its sentence's length limit may only emit </s>, and none may before `min_steps` tokens. (2) The
    2k best (beam, token) candidates by accumulated log P are kept (`_candidates`). (3) The best k that did not finish
    run on (`_run_on`). (4) Those among the best k that finished enter the sentence's k finished hypotheses if log P /
    lp(|Y|) ranks among the k best so far (`_add_finished`). (5) A sentence is done by `early_stopping`'s rule or once
    its `num_return_sequences` best are final (`_sentences_done`), and leaves the batch.

    It returns (B * num_return_sequences, 1 + longest) ids: the start token, the best hypotheses in descending score
    order, padded with `fill_value` (as transformers pads)."""
    device, dtype = encoder_hidden_states.device, encoder_hidden_states.dtype
    batch = encoder_hidden_states.shape[0]
    k, keep = num_beams, 2 * num_beams  # transformers keeps (1 + number of eos ids) * k candidates per step
    max_new = max_length - 1  # At most this many tokens follow the start token.
    limits = limits.to(device) if limits is not None else None  # (B,) a beam at its limit may only emit </s>
    # (B,): the length no hypothesis can exceed, which bounds early stopping.
    length_bounds = limits.clamp(max=max_new) if limits is not None else torch.full((batch,), max_new, device=device)
    alpha = float(alpha)
    source = project_source(model, encoder_hidden_states, encoder_attention_mask)
    beams = _Beams.start(batch, k, max_new, fill_value, source, device)
    # The results are stored by each sentence's original index.
    out_tokens = torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device)
    out_lengths = torch.zeros(batch, k, dtype=torch.long, device=device)
    buffers = _buffers(model, batch * k, max_new, dtype, device)
    top_num_beams = torch.arange(keep, device=device) < k  # Only the best k may finish, as in transformers.

    tokens = decoder_start_ids.to(device)  # (rows,) the last token of every running beam
    group = 1  # Rows per sentence: 1 at the first step (identical beams), then k.
    for step in range(max_new):
        rows = tokens.shape[0]
        hidden = decoder_step(model, tokens, step, buffers, beams.source, group)
        # Scores are fp32 whatever the weights' precision: sums of log P over steps need its mantissa. On a CPU,
        # log_softmax's dtype= still converts the (rows, V) logits first (about 9% of a bf16 beam search, profiled).
        log_probs = nn.functional.log_softmax(model.lm_head(hidden), dim=-1, dtype=torch.float32)  # (rows, V)
        at_limit = (step + 1 >= limits[beams.ids]).repeat_interleave(group) if limits is not None else None
        log_probs = _restrict(log_probs, step, min_steps, at_limit, eos_token_id)
        top_scores, origins, new_tokens, candidates = _candidates(log_probs, beams, group, keep, step)
        hits = (new_tokens == eos_token_id) | (step + 2 >= max_length)  # All end at max_length (MaxLengthCriteria).
        just_finished = hits & top_num_beams
        if bool(just_finished.any()):
            _add_finished(
                beams, top_scores, candidates, just_finished, step, length_penalty, early_stopping, fill_value
            )
        source_rows = _run_on(beams, top_scores, hits, candidates, origins, group, step)  # (A, k)
        done = _sentences_done(
            beams, step, length_bounds, length_penalty, alpha, early_stopping, num_return_sequences, max_length
        )
        if bool(done.any()):  # Sentences that are done leave the batch.
            out_tokens[beams.ids[done]] = beams.finished_tokens[done]
            out_lengths[beams.ids[done]] = beams.finished_lengths[done]
            if bool(done.all()):
                break
            kept = (~done).nonzero().squeeze(1)
            beams, source_rows = beams.select(kept), source_rows[kept]
        for buffer in buffers:
            buffer.reorder(rows, step + 1, source_rows.reshape(-1))
        tokens = beams.running_tokens[:, :, step].reshape(-1)
        group = k
    return _sequences(out_tokens, out_lengths, decoder_start_ids, num_return_sequences, fill_value)


@torch.no_grad()
def lean_greedy_search(
    model: nn.Module,
    encoder_hidden_states: torch.Tensor,  # (B, S, D)
    encoder_attention_mask: torch.Tensor | None,  # (B, S)
    decoder_start_ids: torch.Tensor,  # (B,)
    *,
    limits: torch.Tensor | None,
    max_length: int,
    eos_token_id: int,
    fill_value: int,
    min_steps: int = 0,
) -> torch.Tensor:
    """Decode greedily (`num_beams=1`) as transformers' `_sample` does without sampling -- the argmax of the
    logits, </s> forced at a sentence's length limit and forbidden before `min_steps` tokens -- with a sentence leaving
    the batch at its </s> (transformers keeps computing it, emitting padding, until the last sentence ends).

    It returns (B, 1 + longest) ids: the start token and the generated tokens, padded with `fill_value` (pad id)."""
    device, dtype = encoder_hidden_states.device, encoder_hidden_states.dtype
    batch = encoder_hidden_states.shape[0]
    max_new = max_length - 1
    source = project_source(model, encoder_hidden_states, encoder_attention_mask)
    buffers = _buffers(model, batch, max_new, dtype, device)
    limits = limits.to(device) if limits is not None else None
    sentence_ids = torch.arange(batch, device=device)
    generated = torch.full((batch, 1, max(max_new, 0)), fill_value, dtype=torch.long, device=device)
    tokens, longest = decoder_start_ids.to(device), 0
    for step in range(max_new):
        rows = tokens.shape[0]
        # The argmax is taken in the model's precision, since an upcast would change no comparison.
        logits = model.lm_head(decoder_step(model, tokens, step, buffers, source, 1))  # (rows, V)
        at_limit = step + 1 >= limits[sentence_ids] if limits is not None else None
        tokens = _restrict(logits, step, min_steps, at_limit, eos_token_id).argmax(-1)  # (rows,)
        generated[sentence_ids, 0, step] = tokens
        longest = step + 1
        done = tokens == eos_token_id
        if bool(done.all()):
            break
        if bool(done.any()):
            kept = (~done).nonzero().squeeze(1)
            sentence_ids, tokens, source = sentence_ids[kept], tokens[kept], source.select(kept)
            for buffer in buffers:
                buffer.reorder(rows, step + 1, kept)
    lengths = torch.full((batch, 1), longest, dtype=torch.long, device=device)
    return _sequences(generated, lengths, decoder_start_ids, 1, fill_value)
