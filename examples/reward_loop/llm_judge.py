"""A reward scored by an LLM judge behind an OpenAI-compatible endpoint (docs/reward_loop.md).

A judge served elsewhere (`vllm serve`, any such server):

    reward_model.use_reward_loop=true reward_model.reward_manager=rate_limited \
    reward_model.max_concurrent=8 reward_model.max_rpm=600 reward_model.timeout=60 \
    custom_reward_function.path=examples/reward_loop/llm_judge.py \
    +custom_reward_function.reward_kwargs.base_url=http://127.0.0.1:8000/v1 \
    +custom_reward_function.reward_kwargs.model=judge

Or a judge the trainer serves itself on its own engine (a generative reward model, upstream's keys); the address
comes to this function as reward_router_address:

    reward_model.enable=true reward_model.use_reward_loop=true reward_model.num_workers=8 \
    reward_model.model.path=/path/to/judge reward_model.rollout.name=hf \
    reward_model.rollout.prompt_length=1024 reward_model.rollout.response_length=64 \
    custom_reward_function.path=examples/reward_loop/llm_judge.py

The judge reads extra_info["question"], the response and the ground truth, and ends with `SCORE: <0-10>`; the
reward is that score / 10. A judge too small to write that line reliably can be scored from the probability of a
verdict word instead (one token asked, with its top log-probs; the hf judge engine serves them):

    '+custom_reward_function.reward_kwargs.verdict_tokens=[Yes,No]'

which scores p(Yes) / (p(Yes) + p(No)) under the prompt verl.workers.reward_loop.judge.VERDICT_TOKEN_TEMPLATE.
"""

from verl.workers.reward_loop.judge import judge_compute_score


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **judge_kwargs):
    return await judge_compute_score(data_source, solution_str, ground_truth, extra_info, **judge_kwargs)
