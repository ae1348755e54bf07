"""A discriminative reward model scored per sample in the reward loop (upstream's ``compute_score_disrm``).

With ``reward_model.enable``, ``use_reward_loop`` and ``rollout.name`` set and no custom reward function, upstream
serves ``reward_model.model.path`` on its engine and the reward loop asks it about each sample the moment the
sample's trajectory ends. ``DisRMRewardManager.run_single`` does the same here:

- the conversation: the dataset's messages (``raw_prompt``; without them the decoded prompt, for one user turn) and
  the response decoded with the policy's tokenizer, its EOS text removed, as the assistant's turn;
- rendered with the reward model's chat template (no generation prompt) and sent as text to the reward-model
  server's ``POST /classify`` (verl.workers.rollout.classify_server) with ``use_activation: false`` and
  ``add_special_tokens: false`` (the template already holds the special tokens);
- ``data[-1].probs[-1]`` of the answer is the sample's reward, placed on its last response token (an empty response
  is not sent and gets 0, as the worker drops its score).

The FSDP reward-model worker reads the same text the same way when it re-templates (``model.input_tokenizer`` set):
the scores are equal (tests/workers/reward_loop/test_disrm_loop.py). Connection failures, timeouts and 5xx are
retried as the judges' are (verl.workers.reward_loop.judge); a sample that still fails fails the step by name.
"""

from __future__ import annotations

from typing import Any

from verl.protocol import DataProto
from verl.workers.reward_loop.base import RewardManagerBase, SampleScore

__all__ = ["DisRMRewardManager"]


class DisRMRewardManager(RewardManagerBase):
    """``tokenizer``: the policy's; ``endpoint``: the reward-model server's (verl.workers.genrm_engine.GenRMEndpoint:
    its address, set once the trainer started the server, and the reward model's tokenizer)."""

    def __init__(self, config: Any, tokenizer: Any, endpoint: Any, request_timeout: float = 60.0,
                 max_retries: int = 3) -> None:
        super().__init__(config, tokenizer)
        self.endpoint = endpoint
        self.model_name = config.reward_model.model.path if config is not None else None
        self.request_timeout = request_timeout
        self.max_retries = max_retries

    def rm_text(self, data: DataProto) -> str:
        """The one row of ``data`` as the reward model reads it: its chat, rendered by its template."""
        from verl.workers.reward_model_inputs import chat_messages, response_text

        chat = chat_messages(data, 0, self.tokenizer, None)
        chat.append({"role": "assistant", "content": response_text(data, 0, self.tokenizer)})
        return self.endpoint.tokenizer().apply_chat_template(chat, add_generation_prompt=False, tokenize=False)

    async def run_single(self, data: DataProto) -> SampleScore:
        from verl.workers.reward_loop.judge import JudgeResponseError, OpenAIJudge

        if int(data.batch["attention_mask"][0, -data.batch["responses"].size(1):].sum()) == 0:
            # an empty response has no last token to hold a score: the row gets 0, as the reward-model worker's
            return {"reward_score": 0.0, "reward_extra_info": {}}
        address = self.endpoint.kwargs()["reward_router_address"]
        client = OpenAIJudge(f"http://{address}", model=self.model_name, request_timeout=self.request_timeout,
                             max_retries=self.max_retries)
        body = {"model": self.model_name, "input": self.rm_text(data), "use_activation": False,
                "add_special_tokens": False}
        reply = await client.post(body, path="classify")
        try:
            score = float(reply["data"][-1]["probs"][-1])
        except (KeyError, IndexError, TypeError, ValueError):
            raise JudgeResponseError(f"the reward-model server at {address} answered /classify without "
                                     f"data[-1].probs[-1]: {str(reply)[:200]!r}") from None
        return {"reward_score": score, "reward_extra_info": {}}
