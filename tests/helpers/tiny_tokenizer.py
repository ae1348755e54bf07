"""A small byte-level BPE tokenizer with a ChatML chat template, built in memory (no downloads).

Byte-level BPE round-trips any text exactly, so tests can decode responses and check the strings the
reward sees. The special tokens and template mirror SmolLM2-Instruct's layout.
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|im_end|>"
BOS_TOKEN = "<|im_start|>"
SPECIAL_TOKENS = [PAD_TOKEN, "<|endoftext|>", BOS_TOKEN, EOS_TOKEN]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "Tom has 12 apples. He buys 5 more and gives away 3. How many apples does Tom have now?",
    "Let's think step by step and output the final answer after \"####\". 12 + 5 = 17. 17 - 3 = 14. #### 14",
    "The answer is \\boxed{\\frac{1}{2}}. Compute 3 * 4 - 2 = 10. The total is 42 dollars.",
    "user assistant system Question: Answer: Solve the problem. Show your steps, then write the answer.",
    "<answer>(3 + 5) * 2</answer> Using the numbers 2, 3, 5 create an equation that equals 16.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000",
]


@functools.lru_cache(maxsize=4)
def build_tiny_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A fresh fast tokenizer: pad <|pad|> (id 0), eos <|im_end|>, ChatML chat_template. Deterministic.

    Cached: treat the result as read-only (copy it before changing attributes).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=BOS_TOKEN,
        unk_token=None,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.padding_side = "left"
    return wrapped
