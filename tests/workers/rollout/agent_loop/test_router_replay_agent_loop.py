"""R3 through the agent loop (rollout.mode=async) on the HF engine, with a tiny Qwen3-MoE: the batch's routed_experts
are the actor's own routing on the same tokens, replaying them gives the rollout's log-probs after the router
changed; multi-turn trajectories carry the last turn's record; outputs_to_batch aligns records with input_ids; and
the pre-Ray check accepts async + hf and refuses vllm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.tiny_model import VOCAB_SIZE
from tests.helpers.tiny_moe import perturb_unused_experts, tiny_qwen3_moe
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.agent_loop.helpers import PROMPT_LEN, RESPONSE_LEN, arr_config, hf_manager, prompt_batch
from tests.workers.rollout.agent_loop.scripted import ScriptedBackend
from tests.workers.rollout.agent_loop.test_tool_agent import CALL, _config, _turns
from verl.models.router_replay import NOT_ROUTED, ROUTED_EXPERTS_KEY
from verl.protocol import DataProto
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.workers.rollout.agent_loop.manager import AgentLoopManager
from verl.workers.rollout.agent_loop.outputs import outputs_to_batch
from verl.workers.rollout.vllm.sampling import sampling_kwargs

R3 = {"rollout.enable_rollout_routing_replay": True, "rollout.calculate_log_probs": True}


def _params(config, meta):
    params = sampling_kwargs(config.rollout, meta)
    params.pop("n")
    return params


def _actor(model, mode):
    return DataParallelPPOActor(actor_config(use_remove_padding=True, **{"router_replay.mode": mode}), model, None)


@register("test_r3_two_turn_agent")
class TwoTurnAgent(AgentLoopBase):
    """Generates 2 tokens, splices in 3 'tool' tokens, generates 2 more; keeps the last turn's record."""

    async def run(self, sampling_params, **kwargs):
        prompt = list(kwargs["raw_prompt_ids"])
        first = await self.server_manager.generate("r", prompt_ids=prompt,
                                                   sampling_params={**sampling_params, "max_tokens": 2})
        tool = [7, 8, 9]
        second = await self.server_manager.generate("r", prompt_ids=prompt + first.token_ids + tool,
                                                    sampling_params={**sampling_params, "max_tokens": 2})
        assert first.routed_experts.shape == (len(prompt) + 2, 2, 2)
        return AgentLoopOutput(prompt_ids=prompt, response_ids=first.token_ids + tool + second.token_ids,
                               response_mask=[1, 1, 0, 0, 0, 1, 1], num_turns=4,
                               response_logprobs=first.log_probs + [0.0] * 3 + second.log_probs,
                               routed_experts=second.routed_experts)


def _rollout(model, multi_turn: bool):
    config = arr_config(**R3)
    columns = {"agent_name": ["test_r3_two_turn_agent"] * 4} if multi_turn else None
    # an EOS never sampled: every row generates its full budget
    batch = prompt_batch(columns=columns, eos=[VOCAB_SIZE + 1])
    out = hf_manager(model, config).generate_sequences(batch, _params(config, batch.meta_info))
    out.meta_info.update({"temperature": 1.0, "micro_batch_size": 2})
    return out


@pytest.mark.parametrize("multi_turn", [False, True])
def test_agent_loop_routed_experts_are_the_actors_routing_and_replay_gives_the_rollout_log_probs(multi_turn):
    model = tiny_qwen3_moe()
    out = _rollout(model, multi_turn)
    b = out.batch
    routed = b[ROUTED_EXPERTS_KEY]
    mask = b["attention_mask"].bool()
    assert routed.shape == (4, PROMPT_LEN + RESPONSE_LEN, 2, 2) and routed.dtype == torch.int16
    assert (routed[~mask] == NOT_ROUTED).all()
    # every real token but each row's last (the engine never feeds it) is recorded, tool tokens included (the last
    # turn's request prefilled them)
    for row in range(4):
        real = mask[row].nonzero().squeeze(-1)
        assert (routed[row, real[:-1]] >= 0).all(), row
        assert (routed[row, real[-1]] == NOT_ROUTED).all(), row
    if multi_turn:
        assert b["response_mask"][0].tolist() == [1, 1, 0, 0, 0, 1, 1, 0]
        assert b["responses"][0, 2:5].tolist() == [7, 8, 9]
    # the batch's routing is the actor's own on the same tokens and weights (before any update)
    recorder = _actor(model, "R2")
    own_log_probs, _ = recorder.compute_log_prob(out)
    actor_routing = recorder.last_routed_experts
    seen = routed >= 0
    assert torch.equal(routed[seen], actor_routing[seen])
    response_mask = b["response_mask"].bool()
    rollout_log_probs = b["rollout_log_probs"]
    torch.testing.assert_close(own_log_probs[response_mask], rollout_log_probs[response_mask], rtol=1e-4, atol=1e-4)
    # the router changes: replaying the batch's routed_experts still gives the rollout's log-probs; routing freely
    # does not
    assert perturb_unused_experts(model, actor_routing) > 0
    replayed, _ = _actor(model, "R3").compute_log_prob(out)
    drifted, _ = _actor(model, "disabled").compute_log_prob(out)
    torch.testing.assert_close(replayed[response_mask], own_log_probs[response_mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(replayed[response_mask], rollout_log_probs[response_mask], rtol=1e-4, atol=1e-4)
    assert (drifted - own_log_probs)[response_mask].abs().max() > 1e-3


def test_outputs_to_batch_aligns_records_with_input_ids():
    """Prompt left-padded, response right-padded; a record that stops short (before tool tokens after the last turn,
    or a trajectory without one) leaves NOT_ROUTED."""
    record = torch.arange(5 * 2, dtype=torch.int16).reshape(5, 1, 2)  # 2 prompt tokens + 3 response tokens
    outputs = [
        AgentLoopOutput(prompt_ids=[3, 4], response_ids=[5, 6, 7], response_mask=[1, 1, 1], routed_experts=record),
        AgentLoopOutput(prompt_ids=[3], response_ids=[5, 6, 7, 8], response_mask=[1, 0, 0, 1],
                        routed_experts=record[:3]),  # its record stops before the tool tokens
        AgentLoopOutput(prompt_ids=[3], response_ids=[5], response_mask=[1]),  # no record
    ]
    routed = outputs_to_batch(outputs, prompt_length=3, response_length=4, pad_token_id=0).batch[ROUTED_EXPERTS_KEY]
    assert routed.shape == (3, 7, 1, 2)
    x = NOT_ROUTED
    assert routed[0, :, 0, 0].tolist() == [x, 0, 2, 4, 6, 8, x]
    assert routed[1, :, 0, 1].tolist() == [x, x, 1, 3, 5, x, x]
    assert (routed[2] == NOT_ROUTED).all()
    assert "routed_experts" not in outputs_to_batch(outputs[2:], 3, 4, 0).batch.keys()
    with pytest.raises(ValueError, match="routed_experts"):
        outputs_to_batch([AgentLoopOutput(prompt_ids=[3], response_ids=[5], response_mask=[1],
                                          routed_experts=record)], 3, 4, 0)


@pytest.fixture(scope="module")
def moe_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_moe")
    tiny_qwen3_moe().config.save_pretrained(folder)
    return str(folder)


ARR = "actor_rollout_ref"
R3_KEYS = [f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true"]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_pre_ray_check_accepts_r3_with_the_hf_rollout_in_both_modes(moe_folder, mode):
    cfg = validate_config(load_config([f"{ARR}.model.path={moe_folder}", *R3_KEYS, f"{ARR}.rollout.name=hf",
                                       f"{ARR}.rollout.mode={mode}"]), check_files=False)
    assert cfg.actor_rollout_ref.rollout.mode == mode and cfg.actor_rollout_ref.actor.router_replay.mode == "R3"


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_pre_ray_check_refuses_r3_with_vllm_without_a_cuda_gpu(moe_folder, mode, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError) as err:
        validate_config(load_config([f"{ARR}.model.path={moe_folder}", *R3_KEYS, f"{ARR}.rollout.name=vllm",
                                     f"{ARR}.rollout.mode={mode}"]), check_files=False)
    text = str(err.value)
    assert "actor_rollout_ref.rollout.name=vllm needs a CUDA GPU" in text and "Model Runner V2" in text
    assert "use actor_rollout_ref.rollout.name=hf" in text


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_pre_ray_check_accepts_r3_with_vllm_on_a_cuda_gpu_with_prefix_caching(moe_folder, mode, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    keys = [f"{ARR}.model.path={moe_folder}", *R3_KEYS, f"{ARR}.rollout.name=vllm", f"{ARR}.rollout.mode={mode}"]
    cfg = validate_config(load_config(keys), check_files=False)
    assert cfg.actor_rollout_ref.rollout.enable_prefix_caching  # upstream's default, which vLLM's record needs
    with pytest.raises(ConfigError, match="vLLM returns routed experts only with prefix caching on"):
        validate_config(load_config([*keys, f"{ARR}.rollout.enable_prefix_caching=false"]), check_files=False)


class _RecordingScript:
    """Wraps a ScriptedBackend: every output carries a record whose expert ids are the token's position in the
    request (prompt + response), the last generated token NOT_ROUTED, as the HF engine lays it out."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def step(self):
        done = []
        for request, out in self.backend.step():
            n = len(request.prompt_ids) + len(out.token_ids)
            record = torch.arange(n, dtype=torch.int16)[:, None, None].expand(n, 1, 2).clone()
            record[-1] = NOT_ROUTED
            out.routed_experts = record
            done.append((request, out))
        return done


def test_tool_agent_carries_the_last_turns_record(tmp_path):
    """tool_agent: the last turn's request is the whole trajectory so far, so its record covers the prompt, the
    earlier turns and the tool response; tokens after it (none here) would stay NOT_ROUTED."""
    tokenizer = build_tiny_tokenizer()
    backend = _RecordingScript(ScriptedBackend(tokenizer, _turns([CALL % "12*13", "It is 156."])))
    manager = AgentLoopManager(_config(tmp_path), tokenizer, lambda meta: backend)
    messages = [{"role": "system", "content": "Use the calc tool."}, {"role": "user", "content": "What is 12*13?"}]
    prompt = tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
    ids = torch.tensor([prompt])
    columns = {"raw_prompt": [messages], "agent_name": ["tool_agent"],
               "extra_info": [{"tools_kwargs": {"calc": {"create_kwargs": {"seed": 7}}}}]}
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                 "position_ids": torch.arange(len(prompt))[None]},
                                non_tensors={k: np.array(v + [None], dtype=object)[:-1] for k, v in columns.items()},
                                meta_info={"eos_token_id": tokenizer.eos_token_id, "pad_token_id": 0})
    out = manager.generate_sequences(batch, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": 0})
    b = out.batch
    mask = b["response_mask"][0].tolist()
    assert 1 in mask[mask.index(0):]  # a tool turn (mask 0) between the model's two turns
    real = b["attention_mask"][0].bool()
    positions = b[ROUTED_EXPERTS_KEY][0, real, 0, 0]
    n = int(real.sum())
    assert positions[:-1].tolist() == list(range(n - 1))  # every token in input_ids order, tool tokens included
    assert positions[-1] == NOT_ROUTED
    assert (b[ROUTED_EXPERTS_KEY][0, ~real] == NOT_ROUTED).all()

