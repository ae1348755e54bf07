"""Tiny random reward models (token- and sequence-classification, one label) with the default tokenizer, and a
rollout-shaped batch to score: left-padded chat prompts, right-padded responses of different lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.helpers.e2e import default_tokenizer_dir
from verl.protocol import DataProto

# A chat format unlike the policy's (ChatML): the re-templating path must render it.
OTHER_TEMPLATE = ("{% for m in messages %}<<{{ m['role'] }}>> {{ m['content'] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}<<assistant>> {% endif %}")

QUESTIONS = ["What is 2 + 3?", "Tom has 4 apples. He buys 5 more. How many apples does Tom have now?",
             "Add 7 and 8.", "Say hi.", "Compute 9 - 4.", "What is 1 + 1?"]


def make_tiny_rm_dir(out: Path, kind: str = "token", chat_template: str | None = None, seed: int = 0) -> Path:
    """A 2-layer random Llama reward model saved as an HF folder; kind "token" or "sequence" classification."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification, LlamaForTokenClassification

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id, initializer_range=0.5)
    torch.manual_seed(seed)
    cls = LlamaForTokenClassification if kind == "token" else LlamaForSequenceClassification
    model = cls(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_batch(rows: int = 6, prompt_length: int = 64, response_length: int = 10, seed: int = 0,
               raw_chat: bool = True) -> DataProto:
    """A batch as the rollout returns it, from the default tokenizer; one response is empty."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    gen = torch.Generator().manual_seed(seed)
    pad = tokenizer.pad_token_id
    prompts = torch.full((rows, prompt_length), pad, dtype=torch.long)
    responses = torch.full((rows, response_length), pad, dtype=torch.long)
    mask = torch.zeros((rows, prompt_length + response_length), dtype=torch.long)
    chats = []
    for i in range(rows):
        chat = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
        chats.append(chat)
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        prompts[i, prompt_length - len(ids):] = torch.tensor(ids)
        mask[i, prompt_length - len(ids): prompt_length] = 1
        n = 0 if i == 3 else int(torch.randint(2, response_length + 1, (1,), generator=gen))
        if n:
            body = torch.randint(100, 5000, (n - 1,), generator=gen)  # plain tokens, then EOS
            responses[i, :n] = torch.cat([body, torch.tensor([tokenizer.eos_token_id])])
            mask[i, prompt_length: prompt_length + n] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    raw_prompt = np.empty(rows, dtype=object)  # one list of messages per row, as the dataset's collate makes it
    for i, chat in enumerate(chats):
        raw_prompt[i] = chat
    non_tensors = {"raw_prompt": raw_prompt} if raw_chat else {}
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": mask, "position_ids": position_ids,
                 "response_mask": mask[:, prompt_length:].clone()},
        non_tensors=non_tensors)


def reference_scores(rm_dir: Path, batch: DataProto, retemplate: bool = False,
                     max_length: int | None = None) -> torch.Tensor:
    """Each row scored alone by plain HF (no padding, no FSDP): the output at its last token (of the first
    ``max_length`` tokens of the re-templated chat when given)."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    model = AutoModelForTokenClassification.from_pretrained(rm_dir, num_labels=1).eval()
    rm_tok = AutoTokenizer.from_pretrained(rm_dir)
    in_tok = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    out = []
    for i in range(len(batch)):
        if retemplate:
            chat = [dict(m) for m in batch.non_tensor_batch["raw_prompt"][i]]
            n = int(batch.batch["attention_mask"][i, batch.batch["prompts"].size(1):].sum())
            text = in_tok.decode(batch.batch["responses"][i, :n].tolist()).replace(in_tok.eos_token, "")
            chat.append({"role": "assistant", "content": text})
            ids = rm_tok.encode(rm_tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)
            ids = torch.tensor([ids[:max_length] if max_length else ids])
        else:
            ids = batch.batch["input_ids"][i][batch.batch["attention_mask"][i].bool()][None]
        with torch.no_grad():
            out.append(model(input_ids=ids).logits[0, -1, 0].float())
    return torch.stack(out)


def expected_rm_scores(batch: DataProto, scores: torch.Tensor) -> torch.Tensor:
    """scores on each row's last real response token, zeros elsewhere (and for an empty response)."""
    response_length = batch.batch["responses"].size(1)
    valid = batch.batch["attention_mask"][:, -response_length:].sum(-1)
    expected = torch.zeros(len(batch), response_length)
    for i, n in enumerate(valid.tolist()):
        if n > 0:
            expected[i, n - 1] = scores[i]
    return expected
