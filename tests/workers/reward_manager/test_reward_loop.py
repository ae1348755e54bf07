"""The reward loop (reward_model.use_reward_loop): scores, extra info and metrics equal the batch path's on the same
samples; samples are scored while the rest of the batch is still generating; failures are named, never dropped."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from tests.workers.reward_manager.conftest import make_batch
from tests.workers.reward_manager.loop_scorers import dict_score, slow_on_row_one
from tests.workers.rollout.agent_loop.helpers import arr_config, prompt_batch
from tests.workers.rollout.agent_loop.scripted import ScriptedBackend
from verl.trainer.ppo.reward import compute_reward, reward_metrics
from verl.workers.reward_loop import RewardLoopError, RewardLoopManager, RewardLoopSession
from verl.workers.reward_manager import NaiveRewardManager
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.agent_loop.manager import AgentLoopManager
from verl.workers.rollout.vllm.sampling import sampling_kwargs

SAMPLES = [("Compute 3 * 4 - 2", "3 * 4 - 2 = 10. #### 10", "10"),
           ("Tom has 12 apples", "12 + 5 = 17. #### 17", "14"),
           ("Compute 1 + 1", "The answer is 2", "2"),
           ("Using the numbers 2, 3, 5", "#### 16", "16"),
           ("Question:", "", "1")]


def failing_on_row_two(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if extra_info and extra_info.get("index") == 2:
        raise ValueError("judge said nothing")
    return 1.0


def _batch_and_loop(tokenizer, fn, num_workers=2, **kwargs):
    data, _ = make_batch(tokenizer, SAMPLES)
    batch_manager = NaiveRewardManager(tokenizer, 0, fn, num_processes=2, **kwargs)
    loop_manager = RewardLoopManager(NaiveRewardManager(tokenizer, 0, fn, **kwargs), num_workers)
    return data, batch_manager, loop_manager


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["in-process", "scoring-processes"])
def test_loop_equals_batch_path(tokenizer, timeout):
    data, batch_manager, loop_manager = _batch_and_loop(tokenizer, dict_score, timeout=timeout)
    try:
        want_tensor, want_extra = compute_reward(data, batch_manager)
        got_tensor, got_extra = compute_reward(data, loop_manager)
    finally:
        batch_manager.close()
        loop_manager.close()
    assert torch.equal(got_tensor, want_tensor)
    assert got_extra == want_extra
    assert ("reward_timeout" in got_extra) == (timeout is not None)
    assert reward_metrics(got_extra) == reward_metrics(want_extra)


def test_timed_out_sample_is_filled_and_counted_as_on_the_batch_path(tokenizer):
    data, batch_manager, loop_manager = _batch_and_loop(tokenizer, slow_on_row_one, timeout=1.0)
    try:
        want_tensor, want_extra = compute_reward(data, batch_manager)
        got_tensor, got_extra = compute_reward(data, loop_manager)
    finally:
        batch_manager.close()
        loop_manager.close()
    assert torch.equal(got_tensor, want_tensor)
    assert got_extra == want_extra
    assert got_extra["reward_timeout"] == [False, True, False, False, False]
    assert reward_metrics(got_extra) == {"reward/timeouts": 1.0}


def test_a_failing_sample_is_named_and_the_others_finish(tokenizer):
    data, _, loop_manager = _batch_and_loop(tokenizer, failing_on_row_two, timeout=None)
    session = loop_manager.spec().session()
    try:
        for i in range(len(data)):
            session.submit(i, data[i:i + 1])
        with pytest.raises(RewardLoopError, match=r"1 of 5 samples[\s\S]*row 2: RewardScoreError.*judge said nothing"):
            session.finish(len(data))
        assert sorted(session.order) == [0, 1, 3, 4]  # every other sample was scored, none dropped
    finally:
        session.close()
        loop_manager.close()


class _Scripted:
    async def run_single(self, data):
        index = data.non_tensor_batch["extra_info"][0]["index"]
        await asyncio.sleep(0)
        return {"reward_score": float(index), "reward_extra_info": {"i": index}}


def test_session_runs_num_workers_at_once_and_returns_rows_in_order():
    class Gate(_Scripted):
        def __init__(self):
            self.running, self.peak, self.release = 0, 0, None

        async def run_single(self, data):
            self.running += 1
            self.peak = max(self.peak, self.running)
            if self.release is None:
                self.release = asyncio.Event()
            if self.running == 2:  # the second concurrent sample opens the gate for all
                self.release.set()
            await self.release.wait()
            self.running -= 1
            return await super().run_single(data)

    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    data, _ = make_batch(build_tiny_tokenizer(), SAMPLES)
    gate = Gate()
    with RewardLoopSession(gate, num_workers=2) as session:
        for i in reversed(range(len(data))):
            session.submit(i, data[i:i + 1])
        results = session.finish(len(data))
    assert [r["reward_score"] for r in results] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert gate.peak == 2


# -- through the agent loop --------------------------------------------------------------------------------------

SCORED = threading.Event()


def sets_event_on_row_zero(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if extra_info["index"] == 0:
        SCORED.set()
    return {"score": float(extra_info["index"]), "text": solution_str}


@register("test_waits_for_row_zero_score")
class WaitsForRowZeroScore(AgentLoopBase):
    """Row 0 ends at once; the other rows end only after row 0's score exists: they can only finish if scoring
    runs while the batch is still generating."""

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["raw_prompt_ids"])
        if kwargs["extra_info"]["index"] != 0:
            assert await asyncio.to_thread(SCORED.wait, 60), "row 0 was not scored while the batch was generating"
        out = await self.server_manager.generate("r", prompt_ids=prompt, sampling_params=sampling_params)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=out.token_ids, response_mask=[1] * len(out.token_ids),
                               num_turns=2)


class SeededScripted(ScriptedBackend):
    """Seeds each request itself (as vLLM does), so the engine starts a batch without waiting for every row."""

    def request_seed(self, *args, **kwargs):
        return 0


def test_agent_loop_scores_each_sample_as_it_finishes_and_equals_the_batch_path(tokenizer):
    SCORED.clear()
    config = arr_config(**{"rollout.agent.num_workers": 2})
    rows = 4
    columns = {"agent_name": ["test_waits_for_row_zero_score"] * rows, "data_source": ["toy"] * rows,
               "reward_model": [{"ground_truth": "x"}] * rows, "extra_info": [{"index": i} for i in range(rows)]}
    prompts = prompt_batch(columns=columns, do_sample=False, validate=True)
    loop = RewardLoopManager(NaiveRewardManager(tokenizer, 0, sets_event_on_row_zero, timeout=None), 2)
    prompts.meta_info["reward_loop"] = loop.spec()
    backend = SeededScripted(tokenizer, lambda text: "so #### 10")
    manager = AgentLoopManager(config, tokenizer, lambda meta: backend)
    params = sampling_kwargs(config.rollout, prompts.meta_info)
    params.pop("n")
    out = manager.generate_sequences(prompts, params)
    assert "reward_loop" not in prompts.meta_info and manager.sample_done is None
    assert out.meta_info["reward_extra_keys"] == ["score", "text"]
    assert list(out.non_tensor_batch["__rm_scored__"]) == [True] * rows
    # the batch path on the same samples: the trainer's batch has the prompt's columns, not the loop's scores
    batch = out.select(batch_keys=[k for k in out.batch.keys() if k != "rm_scores"],
                       non_tensor_batch_keys=["__num_turns__"])
    for key in ("data_source", "reward_model", "extra_info"):
        batch.non_tensor_batch[key] = prompts.non_tensor_batch[key]
    batch.non_tensor_batch.pop("__num_turns__")  # popped by the trainer before the reward (pop_agent_metrics)
    want_tensor, want_extra = compute_reward(batch, NaiveRewardManager(tokenizer, 0, sets_event_on_row_zero,
                                                                       timeout=None))
    got_tensor, got_extra = compute_reward(out, loop)
    assert torch.equal(got_tensor, want_tensor)
    assert got_extra == want_extra
    assert got_extra["score"] == [0.0, 1.0, 2.0, 3.0]
    loop.close()


def test_scoring_processes_survive_from_one_session_to_the_next(tokenizer):
    """A scoring process dies with the thread that started it: the spec's threads must outlive each step's session."""
    data, batch_manager, loop_manager = _batch_and_loop(tokenizer, dict_score, timeout=60.0)
    try:
        first = compute_reward(data, loop_manager)
        pids = sorted(p for c in loop_manager.manager._free if c.scorer._pool is not None for p in c.scorer._pool.pids)
        second = compute_reward(data, loop_manager)
        assert sorted(p for c in loop_manager.manager._free if c.scorer._pool is not None
                      for p in c.scorer._pool.pids) == pids
    finally:
        batch_manager.close()
        loop_manager.close()
    assert torch.equal(first[0], second[0]) and first[1] == second[1]
