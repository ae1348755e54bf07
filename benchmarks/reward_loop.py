"""The reward loop against after-the-batch scoring, in one run: generation + reward time of one step's rollouts.

32 trajectories (8 prompts x 4) through the agent loop on HF generate with a random model of SmolLM2-135M's width
(fp32, CPU): row i makes 1 + i % 4 model turns of --turn-tokens tokens (EOS never sampled), so trajectories end at
different times, as in multi-turn RL. The reward sleeps --reward-sleep seconds per sample (a stand-in for a remote
judge or a sandbox: waiting, not computing).

- batch: generate, then the naive manager scores the whole batch (its default: scoring processes, one per core);
- loop:  reward_model.use_reward_loop=true: each sample is scored as its trajectory ends, --num-workers at a time.

Each mode runs --rounds times, alternating, after a warm-up of each that also starts every scoring process (a
process starting inside a timed round costs seconds of CPU on 2 cores); the best round is kept.

    .venv/bin/python benchmarks/reward_loop.py

Prints, last:
    batch_step_s: A (gen G1 + reward R1)   loop_step_s: B (gen+scored G2, waited W after generation)
    reward_hidden_fraction: 1 - W / R1     (the share of the batch path's reward time the loop hid)
    loop_over_batch: B / A
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register  # noqa: E402

SLEEP_S = 0.2


def sleepy_score(data_source, solution_str, ground_truth, extra_info=None, sleep_s=SLEEP_S, **kwargs):
    import time as _time

    _time.sleep(sleep_s)
    return float(len(solution_str) % 7) / 7.0


@register("bench_varied_turns")
class VariedTurns(AgentLoopBase):
    turn_tokens = 16

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["raw_prompt_ids"])
        ids: list[int] = []
        for _ in range(1 + int(kwargs["row"]) % 4):
            out = await self.server_manager.generate("r", prompt_ids=prompt + ids,
                                                     sampling_params={**sampling_params,
                                                                      "max_tokens": self.turn_tokens})
            ids += out.token_ids
        return AgentLoopOutput(prompt_ids=prompt, response_ids=ids, response_mask=[1] * len(ids), num_turns=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=16)
    parser.add_argument("--reward-sleep", type=float, default=SLEEP_S)
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import functools

    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from verl.protocol import DataProto
    from verl.trainer.config import ActorRolloutRefConfig
    from verl.trainer.ppo.reward import compute_reward
    from verl.utils.config_schema import build_config
    from verl.workers.reward_loop import RewardLoopManager
    from verl.workers.reward_manager import NaiveRewardManager
    from verl.workers.rollout import HFRollout
    from verl.workers.rollout.agent_loop.backends import HFBackend
    from verl.workers.rollout.agent_loop.manager import AgentLoopManager
    from verl.workers.rollout.vllm.sampling import sampling_kwargs

    torch.manual_seed(0)
    VariedTurns.turn_tokens = args.turn_tokens
    tokenizer = build_tiny_tokenizer()
    vocab = len(tokenizer)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=576, intermediate_size=1536,
                                         num_hidden_layers=6, num_attention_heads=9, num_key_value_heads=3,
                                         max_position_embeddings=512, tie_word_embeddings=True)).eval()
    prompt_len, response_len = 16, 4 * args.turn_tokens
    result = build_config(ActorRolloutRefConfig, {"model": {"path": "unused"}, "rollout": {
        "mode": "async", "name": "hf", "prompt_length": prompt_len, "response_length": response_len,
        "agent": {"num_workers": 4}}})
    assert not result.problems, result.problems
    config = result.config
    rollout = HFRollout(model, config.rollout)
    manager = AgentLoopManager(config, tokenizer, lambda meta: HFBackend(rollout, meta, prompt_len))

    rows = args.prompts * args.n
    ids = torch.randint(10, vocab - 10, (rows, prompt_len))
    mask = torch.ones_like(ids)
    columns = {"agent_name": ["bench_varied_turns"] * rows, "row": list(range(rows)),
               "data_source": ["bench"] * rows, "reward_model": [{"ground_truth": "0"}] * rows,
               "extra_info": [{"index": i} for i in range(rows)]}
    score = functools.partial(sleepy_score, sleep_s=args.reward_sleep)

    def prompts() -> DataProto:
        return DataProto.from_dict({"input_ids": ids, "attention_mask": mask,
                                    "position_ids": torch.cumsum(mask, -1) - 1},
                                   non_tensors={k: np.array(v, dtype=object) for k, v in columns.items()},
                                   meta_info={"eos_token_id": vocab + 1, "pad_token_id": 0, "do_sample": True})

    def with_columns(out: DataProto, batch: DataProto) -> DataProto:
        for key in ("data_source", "reward_model", "extra_info"):
            out.non_tensor_batch[key] = batch.non_tensor_batch[key]
        out.non_tensor_batch.pop("__num_turns__", None)
        return out

    batch_manager = NaiveRewardManager(tokenizer, 0, score)  # scoring processes, one per core (the default)
    loop_manager = RewardLoopManager(NaiveRewardManager(tokenizer, 0, score), args.num_workers)

    def run_batch() -> dict[str, float]:
        batch = prompts()
        start = time.perf_counter()
        out = manager.generate_sequences(batch, _params(sampling_kwargs, config, batch))
        gen = time.perf_counter() - start
        compute_reward(with_columns(out, batch), batch_manager)
        total = time.perf_counter() - start
        return {"step": total, "gen": gen, "reward": total - gen}

    def run_loop() -> dict[str, float]:
        batch = prompts()
        batch.meta_info["reward_loop"] = loop_manager.spec()
        start = time.perf_counter()
        out = manager.generate_sequences(batch, _params(sampling_kwargs, config, batch))
        gen = time.perf_counter() - start
        compute_reward(with_columns(out, batch), loop_manager)  # hands the loop's scores through
        total = time.perf_counter() - start
        return {"step": total, "gen": gen, "wait": manager.last_stats["reward_loop/wait_s"]}

    # warm-up: the model's first passes, and every scoring process (one per concurrent scorer: a whole batch through
    # the loop uses all num_workers of them), so no process starts inside a timed round
    run_batch()
    warm = prompts()
    warm_out = with_columns(manager.generate_sequences(warm, _params(sampling_kwargs, config, warm)), warm)
    loop_manager.compute_rm_score(warm_out)
    run_loop()
    batch_runs, loop_runs = [], []
    for _ in range(args.rounds):
        batch_runs.append(run_batch())
        loop_runs.append(run_loop())
    b = min(batch_runs, key=lambda r: r["step"])
    lo = min(loop_runs, key=lambda r: r["step"])
    batch_manager.close()
    loop_manager.close()
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}, "
          f"{rows} trajectories of 1-4 turns x {args.turn_tokens} tokens, reward sleep {args.reward_sleep} s/sample, "
          f"num_workers {args.num_workers}, best of {args.rounds}")
    print(f"batch_step_s: {b['step']:.2f} (gen {b['gen']:.2f} + reward {b['reward']:.2f})")
    print(f"loop_step_s: {lo['step']:.2f} (gen+scored {lo['gen']:.2f}, waited {lo['wait']:.2f} after generation)")
    print(f"reward_hidden_fraction: {1 - lo['wait'] / b['reward']:.2f}")
    print(f"loop_over_batch: {lo['step'] / b['step']:.2f}")


def _params(sampling_kwargs, config, batch) -> dict:
    params = sampling_kwargs(config.rollout, batch.meta_info)
    params.pop("n", None)
    return params


if __name__ == "__main__":
    main()
