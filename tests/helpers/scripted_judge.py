"""A tiny causal LM that, greedy, answers every chat prompt with the same text (e.g. ``SCORE: 7``): a judge whose
verdict a test knows in advance, built from a config (no downloads).

Every attention and MLP block writes zero, so the last hidden state is the current token's embedding; the chain's
tokens get one-hot embeddings and an untied ``lm_head`` maps each to the next one (the last to EOS), starting from
the last token of the chat template's generation prompt. ``runner_up`` ({single-token text: weight}) gives those
tokens a logit at the answer's first step too (the answer's own weight is 10), for tests of verdict-token
probabilities.
"""

from __future__ import annotations

import torch


def build_scripted_judge_dir(folder, answer: str = "SCORE: 7", runner_up: dict[str, float] | None = None,
                             **model_overrides) -> str:
    """``model_overrides``: tiny_llama config keys (vLLM's CPU attention needs head_dim >= 32: hidden_size=64 with
    two heads)."""
    from tests.helpers.tiny_model import tiny_llama
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = tiny_llama(vocab_size=len(tokenizer), tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, **model_overrides)
    prompt_end = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True,
                                               tokenize=False)
    start = tokenizer(prompt_end, add_special_tokens=False)["input_ids"][-1]
    chain = [start, *tokenizer(answer, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    if len(set(chain[:-1])) != len(chain) - 1 or len(chain) > model.config.hidden_size:
        raise ValueError(f"answer {answer!r} needs distinct tokens, at most hidden_size of them: {chain}")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        for dim, (token, following) in enumerate(zip(chain[:-1], chain[1:])):
            model.model.embed_tokens.weight[token].zero_()
            model.model.embed_tokens.weight[token, dim] = 1.0
            model.lm_head.weight[following, dim] = 10.0
        for text, weight in (runner_up or {}).items():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) != 1 or ids[0] == chain[1]:
                raise ValueError(f"runner_up {text!r} must be one token other than the answer's first: {ids}")
            model.lm_head.weight[ids[0], 0] = float(weight)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
