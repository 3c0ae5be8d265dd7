"""Lean decoding loops for the Transformer's decoder (Section 6.1 decoding), used by
`VaswaniForConditionalGeneration.generate()` in place of transformers' generic `_beam_search` and greedy `_sample`.

They compute what transformers' loops compute -- for beam search the same candidates (top 2k of k beams x V tokens),
the same rule for which hypotheses finish and which beams go on, the same length-normalised scores; for greedy the
same argmax -- so their translations are those of the generic loops (tests/test_beam_search.py checks this). The work
they leave out:

- sentences leave the batch as soon as their result is final (transformers keeps computing every sentence until the
  last one is done, so a batch costs as much as its longest translation);
- at the first step the k beams of a sentence have the same prefix: one row is computed instead of k;
- one decoder step is the layer arithmetic itself (no output dataclasses, mask builders, cache objects or
  logits-processor plumbing per step): the source K/V are projected once per sentence, a sentence's beams query them
  together, and the self-attention K/V live in two preallocated buffers, so reordering beams is one copy per step
  instead of transformers' copy + concatenation;
- sequence bookkeeping touches only the generated prefix, not a (batch, 2k, max_length) tensor per step.

This file is copied next to the weights with the modeling file (a relative import), so it imports only torch.
"""

from collections.abc import Callable

import torch
from torch import nn


class _SelfAttentionBuffers:
    """Self-attention keys and values of one decoder layer for every running row, stored (rows, capacity, H, d) so
    that a row's prefix of `length` positions is one contiguous block; attention reads them as the (rows, H, length,
    d) views SDPA expects.

    Two buffers per tensor: reordering the rows after a step (`reorder`) copies the kept rows' prefixes from one into
    the other with `index_select(out=...)`, a single copy of one block per row (with heads before positions, each row
    would be H blocks: ~1.6x slower); the capacity starts small and doubles, up to `max_positions`, when the prefix
    outgrows it.
    """

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
        self.keys[0][:, :length] = keys[:, :length]
        self.values[0][:, :length] = values[:, :length]

    def append(self, rows: int, position: int, key: torch.Tensor, value: torch.Tensor):
        """Write one position's (rows, H, d) key and value; return the (rows, H, position + 1, d) prefixes."""
        if position >= self.keys[self.current].shape[1]:
            self._grow(position)
        keys, values = self.keys[self.current], self.values[self.current]
        keys[:rows, position] = key
        values[:rows, position] = value
        return keys[:rows, : position + 1].transpose(1, 2), values[:rows, : position + 1].transpose(1, 2)

    def reorder(self, rows: int, length: int, source_rows: torch.Tensor):
        """Row r of the next step is row `source_rows[r]` of this one (beam selection, finished sentences)."""
        nxt = 1 - self.current
        new_rows = source_rows.shape[0]
        torch.index_select(self.keys[self.current][:rows, :length], 0, source_rows,
                           out=self.keys[nxt][:new_rows, :length])
        torch.index_select(self.values[self.current][:rows, :length], 0, source_rows,
                           out=self.values[nxt][:new_rows, :length])
        self.current = nxt


def _buffers(model, rows: int, max_positions: int, dtype, device) -> list[_SelfAttentionBuffers]:
    config = model.config
    return [_SelfAttentionBuffers(rows, config.num_heads, config.d_k, config.d_v, max_positions, dtype, device)
            for _ in model.get_decoder().layers]


def _project_source(model, encoder_hidden_states, encoder_attention_mask):
    """Every decoder layer's source K/V, (B, H, S, d), projected once per sentence; the additive padding mask
    (B, 1, 1, S), or None when nothing is padded."""
    config, dtype = model.config, encoder_hidden_states.dtype
    keys, values = [], []
    for layer in model.get_decoder().layers:
        attn = layer.encoder_attn
        keys.append(attn._split_heads(attn.k_proj(encoder_hidden_states), config.d_k))
        values.append(attn._split_heads(attn.v_proj(encoder_hidden_states), config.d_v))
    mask = None
    if encoder_attention_mask is not None and not bool(encoder_attention_mask.bool().all()):
        batch, length = encoder_attention_mask.shape
        mask = torch.zeros(batch, 1, 1, length, dtype=dtype, device=encoder_hidden_states.device)
        mask.masked_fill_(~encoder_attention_mask.bool()[:, None, None, :], torch.finfo(dtype).min)
    return keys, values, mask


def _decoder_step(model, tokens, step, positions, buffers, cross_keys, cross_values, cross_mask, group):
    """One decoder step for every running row (Section 3.1; dropout is off in eval): (rows,) last tokens -> (rows, D)
    final hidden states. Rows are sentences x `group` consecutive beams; the beams of a sentence query its source
    K/V together."""
    config, decoder = model.config, model.get_decoder()
    heads, d_k, d_v = config.num_heads, config.d_k, config.d_v
    rows = tokens.shape[0]
    alive = rows // group
    hidden = decoder.embed_tokens(tokens) * decoder.embed_scale  # (rows, D)
    hidden = hidden + decoder.embed_positions(positions[step: step + 1], step + 1).to(hidden.dtype)
    for layer, buffer, keys_x, values_x in zip(decoder.layers, buffers, cross_keys, cross_values):
        attn = layer.self_attn
        query = attn.q_proj(hidden).view(rows, heads, 1, d_k)
        keys, values = buffer.append(rows, step, attn.k_proj(hidden).view(rows, heads, d_k),
                                     attn.v_proj(hidden).view(rows, heads, d_v))
        out = nn.functional.scaled_dot_product_attention(query, keys, values, scale=attn.scaling)  # (rows, H, 1, d_v)
        hidden = layer.self_attn_layer_norm(hidden + attn.out_proj(out.view(rows, heads * d_v)))

        attn = layer.encoder_attn
        query = attn.q_proj(hidden).view(alive, group, heads, d_k).transpose(1, 2)  # (A, H, group, d_k)
        out = nn.functional.scaled_dot_product_attention(query, keys_x, values_x, attn_mask=cross_mask,
                                                         scale=attn.scaling)  # (A, H, group, d_v)
        hidden = layer.encoder_attn_layer_norm(hidden + attn.out_proj(out.transpose(1, 2).reshape(rows, heads * d_v)))
        hidden = layer.final_layer_norm(hidden + layer.feed_forward(hidden))
    return hidden


def _keep_sentences(kept: torch.Tensor, cross_keys: list, cross_values: list, cross_mask: torch.Tensor | None):
    """The source K/V and padding mask of the sentences still running (`kept`: their current indices)."""
    return ([x[kept] for x in cross_keys], [x[kept] for x in cross_values],
            cross_mask[kept] if cross_mask is not None else None)


def force_eos(scores: torch.Tensor, rows: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """(N, V) scores with the rows where `rows` (N,) is True replaced by 0 for </s> and -inf elsewhere: those rows can
    only end (the per-sentence length limit; `SourceLengthLimitLogitsProcessor` and both loops use it)."""
    forced = torch.full_like(scores[0], -float("inf"))
    forced[eos_token_id] = 0.0
    return torch.where(rows.unsqueeze(-1), forced, scores)


def top_candidates(log_probs: torch.Tensor, running_scores: torch.Tensor, keep: int, chunk: int = 128):
    """The `keep` best (beam, token) candidates of each sentence by accumulated log P: the values and flat indices
    (beam * V + token) of `torch.topk((log_probs + running_scores[..., None]).view(A, k * V), keep)`, equal up to the
    order among exactly equal scores, without adding the beam scores to all k * V log-probs.

    log_probs: (A, k, V), running_scores: (A, k). Rounding is monotone, so the best sum in a block of `chunk` tokens of
    one beam is the block's best log-prob plus the beam's score (the same float). Every one of the `keep` best sums
    lies in one of the `keep` blocks with the best such maxima, or in the < `chunk` tokens left over at the end of
    each beam's row; only those candidates are summed and ranked. Falls back to the plain sum and `torch.topk` off CPU
    and for short rows."""
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
    if blocks * chunk < vocab:  # the tokens after the last full block of every beam
        tail = (log_probs[:, :, blocks * chunk:] + running_scores[:, :, None]).reshape(alive, -1)
        tail_offsets = (torch.arange(k, device=device)[:, None] * vocab
                        + torch.arange(blocks * chunk, vocab, device=device)).view(1, -1)
        values = torch.cat([values, tail], dim=1)
        offsets = torch.cat([offsets, tail_offsets.expand(alive, -1)], dim=1)
    top, picked = torch.topk(values, keep)
    return top, offsets.gather(1, picked)


@torch.no_grad()
def lean_beam_search(
    model: nn.Module,
    encoder_hidden_states: torch.Tensor,  # (B, S, D): one copy per sentence
    encoder_attention_mask: torch.Tensor | None,  # (B, S), 1 = real token
    decoder_start_ids: torch.Tensor,  # (B,)
    *,
    num_beams: int,
    num_return_sequences: int,
    limits: torch.Tensor | None,  # (B,) generated tokens allowed per sentence, </s> included (None: no limit)
    max_length: int,  # transformers' global max_length: start token + generated tokens
    eos_token_id: int,
    fill_value: int,
    min_steps: int = 0,  # </s> is forbidden before this many tokens (min_length / min_new_tokens)
    length_penalty: Callable,  # number of generated tokens (int or tensor) -> the divisor of log P(Y)
    alpha: float,
    early_stopping: bool | str,
) -> torch.Tensor:
    """Beam search over `model`'s decoder (a VaswaniForConditionalGeneration in eval mode).

    Per step and per sentence, as transformers' `GenerationMixin._beam_search` (v5) does:
    1. log P of every next token for every running beam; a beam at its sentence's length limit may only emit </s>,
       and none may before `min_steps` tokens;
    2. the 2k best (beam, token) candidates by accumulated log P;
    3. the best k candidates that did not finish (</s> or the global max length) run on;
    4. those among the best k that did finish enter the sentence's k finished hypotheses if their score
       log P / length_penalty(|Y|) is among the k best so far (unless the sentence can no longer improve);
    5. the sentence is done when no running beam can beat its worst finished hypothesis even at full length
       (`early_stopping="never"`, the paper's t2t bound; the bound here uses the sentence's own length limit, which is
       still an upper bound, so results are unchanged and sentences stop sooner), at the current length
       (`early_stopping=False`), or once k hypotheses have finished (`early_stopping=True`); and, whatever the rule,
       as soon as the `num_return_sequences` best are final: no running beam, even at its longest, can beat the n-th
       best finished one (with n = 1, the usual case, the search need not wait for k hypotheses to finish).

    Returns (B * num_return_sequences, 1 + longest) token ids: the start token, the best hypotheses in descending
    score order, padded with `fill_value` (as transformers pads).
    """
    device, dtype = encoder_hidden_states.device, encoder_hidden_states.dtype
    batch = encoder_hidden_states.shape[0]
    k, keep = num_beams, 2 * num_beams  # transformers keeps (1 + number of eos ids) * k candidates per step
    max_new = max_length - 1  # generated tokens after the start token
    if limits is not None:
        limits = limits.to(device)  # (B,) a beam reaching its limit may only emit </s>
        length_bounds = limits.clamp(max=max_new)  # (B,) no hypothesis can be longer (for the early-stop bound)
    else:
        length_bounds = torch.full((batch,), max_new, dtype=torch.long, device=device)
    if isinstance(alpha, torch.Tensor):
        alpha = float(alpha)

    # -- per-sentence state (A = sentences still running) ------------------------------------------------------------
    sentence_ids = torch.arange(batch, device=device)  # original index of each running sentence
    cross_keys, cross_values, cross_mask = _project_source(model, encoder_hidden_states, encoder_attention_mask)

    running_scores = torch.full((batch, k), -1.0e9, device=device)  # (A, k) accumulated log P
    running_scores[:, 0] = 0.0  # all beams start identical: only the first one may expand at step 1
    running_tokens = torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device)
    finished_scores = torch.full((batch, k), -1.0e9, device=device)  # (A, k) normalised scores, best first
    finished_tokens = torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device)
    finished_lengths = torch.zeros(batch, k, dtype=torch.long, device=device)
    finished_flags = torch.zeros(batch, k, dtype=torch.bool, device=device)
    can_improve = torch.ones(batch, dtype=torch.bool, device=device)
    # results of sentences that are done, by original index
    out_tokens = torch.full((batch, k, max_new), fill_value, dtype=torch.long, device=device)
    out_lengths = torch.zeros(batch, k, dtype=torch.long, device=device)

    buffers = _buffers(model, batch * k, max_new, dtype, device)
    positions = torch.arange(max_new, device=device)
    top_num_beams = torch.arange(keep, device=device) < k  # only the best k candidates may finish (transformers)
    n = num_return_sequences

    tokens = decoder_start_ids.to(device)  # (rows,) the last token of every running beam
    group = 1  # rows per sentence: 1 at the first step (identical beams), then k
    for step in range(max_new):
        alive, rows = sentence_ids.shape[0], tokens.shape[0]

        hidden = _decoder_step(model, tokens, step, positions, buffers, cross_keys, cross_values, cross_mask, group)
        log_probs = nn.functional.log_softmax(model.lm_head(hidden).float(), dim=-1)  # (rows, V)
        vocab = log_probs.shape[-1]

        if step < min_steps:  # transformers' MinLength / MinNewTokensLength processors: no </s> yet
            log_probs[:, eos_token_id] = -float("inf")
        # a beam at its sentence's length limit may only emit </s> (SourceLengthLimitLogitsProcessor's rule)
        at_limit = step + 1 >= limits[sentence_ids] if limits is not None else None  # (A,)
        if at_limit is not None and bool(at_limit.any()):
            log_probs = force_eos(log_probs, at_limit.repeat_interleave(group), eos_token_id)

        # -- the 2k best candidates of each sentence -----------------------------------------------------------------
        log_probs = log_probs.view(alive, group, vocab).expand(alive, k, vocab)  # group 1: k identical beams
        top_scores, top_indices = top_candidates(log_probs, running_scores, keep)  # (A, 2k)
        origins, new_tokens = top_indices // vocab, top_indices % vocab
        hits = new_tokens == eos_token_id
        if step + 2 >= max_length:  # transformers' MaxLengthCriteria: every candidate ends here
            hits = torch.ones_like(hits)
        prefixes = running_tokens[:, :, :step].gather(1, origins[:, :, None].expand(alive, keep, step))
        candidates = torch.cat([prefixes, new_tokens[:, :, None]], dim=2)  # (A, 2k, step + 1)

        # -- finished hypotheses: log P / lp(|Y|), merged with the sentence's k best so far --------------------------
        just_finished = hits & top_num_beams
        if bool(just_finished.any()):
            normalised = top_scores / length_penalty(step + 1)
            if early_stopping is True:
                normalised = normalised + finished_flags.all(1, keepdim=True).float() * -1.0e9
            normalised = normalised + (~can_improve)[:, None].float() * -1.0e9
            normalised = normalised + (~just_finished) * -1.0e9
            merged_scores = torch.cat([finished_scores, normalised], dim=1)  # (A, 3k)
            best = torch.topk(merged_scores, k).indices
            finished_scores = merged_scores.gather(1, best)
            finished_flags = torch.cat([finished_flags, just_finished], dim=1).gather(1, best)
            padded = torch.full((alive, keep, max_new), fill_value, dtype=torch.long, device=device)
            padded[:, :, : step + 1] = candidates
            finished_tokens = torch.cat([finished_tokens, padded], dim=1).gather(
                1, best[:, :, None].expand(alive, k, max_new))
            lengths = torch.full((alive, keep), step + 1, dtype=torch.long, device=device)
            finished_lengths = torch.cat([finished_lengths, lengths], dim=1).gather(1, best)

        # -- the k best unfinished candidates run on -----------------------------------------------------------------
        running_all = top_scores + hits.float() * -1.0e9
        chosen = torch.topk(running_all, k).indices  # (A, k)
        running_scores = running_all.gather(1, chosen)
        running_tokens[:, :, : step + 1] = candidates.gather(1, chosen[:, :, None].expand(alive, k, step + 1))
        source_rows = origins.gather(1, chosen) if group > 1 else torch.zeros_like(chosen)
        source_rows = source_rows + torch.arange(alive, device=device)[:, None] * group  # (A, k) rows of this step

        # -- can a running beam still beat the worst finished hypothesis? ----------------------------------------------
        # The best score any running beam can still finish with (exact: log P only falls as a beam grows, and lp(|Y|)
        # grows with it for alpha > 0, shrinks for alpha < 0): "never" compares it with the worst finished
        # hypothesis; False uses the current length instead (transformers' heuristic).
        current_length = torch.full_like(sentence_ids, step + 1)
        exact_bound = running_scores[:, 0] / length_penalty(
            (length_bounds[sentence_ids] if alpha > 0.0 else current_length).float())
        if early_stopping == "never":
            best_possible = exact_bound
        else:
            best_possible = running_scores[:, 0] / length_penalty(current_length.float())
        worst_finished = torch.where(finished_flags, finished_scores.min(1, keepdim=True).values, -1.0e9)
        can_improve = can_improve & (best_possible[:, None] > worst_finished).any(1)
        done = ~can_improve
        # The n hypotheses returned are final once no running beam can beat the n-th best finished one even at its
        # longest: only hypotheses that score below it could still finish, and they cannot enter the n best, so the
        # result is transformers' (whose loop goes on until k have finished) with fewer steps. The 1e-6 slack keeps
        # float rounding of lp from ever stopping a sentence that could still change.
        upper_bound = exact_bound + exact_bound.abs() * 1.0e-6
        done = done | (finished_flags[:, n - 1] & (upper_bound < finished_scores[:, n - 1]))
        if early_stopping is True:
            done = done | finished_flags.all(1)
        if step + 2 >= max_length:
            done = torch.ones_like(done)

        # -- sentences that are done leave the batch --------------------------------------------------------------
        if bool(done.any()):
            finished_ids = sentence_ids[done]
            out_tokens[finished_ids] = finished_tokens[done]
            out_lengths[finished_ids] = finished_lengths[done]
            if bool(done.all()):
                break
            kept = (~done).nonzero().squeeze(1)
            sentence_ids = sentence_ids[kept]
            running_scores, running_tokens = running_scores[kept], running_tokens[kept]
            finished_scores, finished_tokens = finished_scores[kept], finished_tokens[kept]
            finished_lengths, finished_flags = finished_lengths[kept], finished_flags[kept]
            can_improve, source_rows = can_improve[kept], source_rows[kept]
            cross_keys, cross_values, cross_mask = _keep_sentences(kept, cross_keys, cross_values, cross_mask)
        source_rows = source_rows.reshape(-1)
        for buffer in buffers:
            buffer.reorder(rows, step + 1, source_rows)
        tokens = running_tokens[:, :, step].reshape(-1)
        group = k

    # -- the best `num_return_sequences` hypotheses of each sentence ------------------------------------------------
    longest = int(out_lengths[:, :n].max()) if batch else 0
    sequences = torch.full((batch * n, 1 + longest), fill_value, dtype=torch.long, device=device)
    sequences[:, 0] = decoder_start_ids.to(device).repeat_interleave(n)
    sequences[:, 1:] = out_tokens[:, :n, :longest].reshape(batch * n, longest)
    return sequences


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
    """Greedy decoding (`num_beams=1`) as transformers' `_sample` computes it without sampling -- the argmax of the
    logits, </s> forced at a sentence's length limit and forbidden before `min_steps` tokens -- with a sentence leaving
    the batch at its </s> (transformers keeps computing it, emitting padding, until the last sentence ends).

    Returns (B, 1 + longest): the start token and the generated tokens, padded with `fill_value` (the pad id)."""
    device, dtype = encoder_hidden_states.device, encoder_hidden_states.dtype
    batch = encoder_hidden_states.shape[0]
    max_new = max_length - 1
    cross_keys, cross_values, cross_mask = _project_source(model, encoder_hidden_states, encoder_attention_mask)
    buffers = _buffers(model, batch, max_new, dtype, device)
    positions = torch.arange(max_new, device=device)
    if limits is not None:
        limits = limits.to(device)
    sentence_ids = torch.arange(batch, device=device)
    generated = torch.full((batch, max(max_new, 0)), fill_value, dtype=torch.long, device=device)
    tokens = decoder_start_ids.to(device)
    longest = 0
    for step in range(max_new):
        rows = tokens.shape[0]
        hidden = _decoder_step(model, tokens, step, positions, buffers, cross_keys, cross_values, cross_mask, 1)
        logits = model.lm_head(hidden).float()  # (rows, V)
        if step < min_steps:
            logits[:, eos_token_id] = -float("inf")
        if limits is not None:
            at_limit = step + 1 >= limits[sentence_ids]
            if bool(at_limit.any()):
                logits = force_eos(logits, at_limit, eos_token_id)
        tokens = logits.argmax(-1)  # (rows,)
        generated[sentence_ids, step] = tokens
        longest = step + 1
        done = tokens == eos_token_id
        if bool(done.all()):
            break
        if bool(done.any()):
            kept = (~done).nonzero().squeeze(1)
            sentence_ids, tokens = sentence_ids[kept], tokens[kept]
            cross_keys, cross_values, cross_mask = _keep_sentences(kept, cross_keys, cross_values, cross_mask)
            for buffer in buffers:
                buffer.reorder(rows, step + 1, kept)
    sequences = torch.full((batch, 1 + longest), fill_value, dtype=torch.long, device=device)
    sequences[:, 0] = decoder_start_ids.to(device)
    sequences[:, 1:] = generated[:, :longest]
    return sequences
