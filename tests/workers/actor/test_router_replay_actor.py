"""actor.router_replay.mode (R2 / R3) in the FSDP actor on one rank, and rollout.enable_rollout_routing_replay in the
hf rollout, on a tiny Qwen3-MoE: what is recorded, that the update's forwards route as recorded (so its first
forward reproduces old_log_probs exactly even after the router changed), padded and packed; and the refusals."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch
from tests.helpers.tiny_moe import ExpertsSpy, perturb_unused_experts, tiny_qwen3_moe
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.test_hf_rollout import prompts, rollout_config
from verl.models.router_replay import NOT_ROUTED, ROUTED_EXPERTS_KEY
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout

PROMPTS = [6, 2, 5, 4]
RESPONSES = [5, 1, 3, 5]


def _actor(model, mode, rmpad=False, optimizer=False, **cfg):
    config = actor_config(use_remove_padding=rmpad, **{"router_replay.mode": mode}, **cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if optimizer else None
    return DataParallelPPOActor(config, model, opt)


def _batch(**meta):
    return rollout_batch(PROMPTS, RESPONSES, meta_info={"micro_batch_size": 2, **meta})


@pytest.mark.parametrize("rmpad", [False, True])
@pytest.mark.parametrize("meta", [{}, {"use_dynamic_bsz": True, "max_token_len": 14}])
def test_r2_log_prob_pass_records_every_token_aligned_with_input_ids(rmpad, meta):
    model = tiny_qwen3_moe()
    data = _batch(**meta)
    actor = _actor(model, "R2", rmpad)
    actor.compute_log_prob(data)
    routed = actor.last_routed_experts
    mask = data.batch["attention_mask"].bool()
    assert routed.shape == (4, mask.size(1), 2, 2) and routed.dtype == torch.int16
    # the same as one plain forward per row on its real tokens (no padding, no batching)
    spy = ExpertsSpy(model)
    with torch.no_grad():
        for row in range(4):
            model(input_ids=data.batch["input_ids"][row][mask[row]][None])
            assert torch.equal(routed[row][mask[row]].long(), spy.stacked().long()), row
    if rmpad:  # the packed path never feeds padding
        assert (routed[~mask] == NOT_ROUTED).all()


def _training_data(model, rmpad):
    data = _batch()
    actor = _actor(model, "R2", rmpad)
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    gen = torch.Generator().manual_seed(3)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch[ROUTED_EXPERTS_KEY] = actor.last_routed_experts
    return data


@pytest.mark.parametrize("rmpad", [False, True])
def test_r2_update_replays_the_recorded_experts(rmpad):
    """The router changes between the old-log-prob pass and the update (as a previous mini-batch's step would change
    it). With replay the update's forward uses the recorded experts, so on its one optimizer step the ratio is
    exactly 1 (ppo_kl 0); without replay the experts change and so do the log-probs."""
    model = tiny_qwen3_moe()
    data = _training_data(model, rmpad)
    assert perturb_unused_experts(model, data.batch[ROUTED_EXPERTS_KEY]) > 0

    plain = copy.deepcopy(model)
    no_replay = data.select(batch_keys=[k for k in data.batch.keys() if k != ROUTED_EXPERTS_KEY])
    drifted = _actor(plain, "disabled", rmpad, optimizer=True).update_policy(no_replay)
    assert abs(drifted["actor/ppo_kl"][0]) > 1e-5

    spy = ExpertsSpy(model)
    replayed = _actor(model, "R2", rmpad, optimizer=True).update_policy(data)
    assert replayed["actor/ppo_kl"][0] == pytest.approx(0.0, abs=1e-7)
    assert replayed["actor/pg_clipfrac"][0] == 0.0
    mask = data.batch["attention_mask"].bool()
    used = []
    for micro in range(2):  # two micro-batches of two rows, in order (shuffle off)
        rows = slice(2 * micro, 2 * micro + 2)
        tokens = spy.stacked(micro)
        expected = data.batch[ROUTED_EXPERTS_KEY][rows]
        expected = expected[mask[rows]] if rmpad else expected.reshape(-1, 2, 2)
        used.append(torch.equal(tokens.long(), expected.long()))
    assert all(used)
    # afterwards the module routes by itself again (the rollout shares it)
    assert model._verl_router_replay.mode is None


def test_r2_update_without_a_record_names_the_key():
    model = tiny_qwen3_moe()
    data = _training_data(model, rmpad=False)
    data.pop(batch_keys=[ROUTED_EXPERTS_KEY])
    with pytest.raises(ValueError, match="needs the batch key 'routed_experts'"):
        _actor(model, "R2", optimizer=True).update_policy(data)


def test_r3_hf_rollout_records_and_the_actor_replays_it():
    model = tiny_qwen3_moe()
    rollout = HFRollout(model, rollout_config(enable_rollout_routing_replay=True))
    assert rollout.static_cache_off is not None
    out = rollout.generate_sequences(prompts(do_sample=False))
    b = out.batch
    routed = b[ROUTED_EXPERTS_KEY]
    mask = b["attention_mask"].bool()
    assert routed.shape == (*b["input_ids"].shape, 2, 2)
    assert (routed[~mask] == NOT_ROUTED).all()
    # every fed token is recorded: each row's last real token is the one generate never feeds back
    last = mask.long().cumsum(-1).argmax(-1)
    for row in range(4):
        real = mask[row].nonzero().squeeze(-1)
        assert (routed[row, real[:-1]] >= 0).all() and (routed[row, last[row]] == NOT_ROUTED).all()
    # the rollout's routing is the actor's own on the same weights (an R2 pass on the finished sequences)
    data = out
    data.meta_info.update({"temperature": 1.0, "micro_batch_size": 2})
    recorder = _actor(model, "R2", rmpad=True)
    expected_log_probs, _ = recorder.compute_log_prob(data)
    actor_routing = recorder.last_routed_experts
    seen = routed >= 0
    assert torch.equal(routed[seen], actor_routing[seen])
    # R3: after the router changes, the log-prob pass replays the rollout's routing and gets the same log-probs
    assert perturb_unused_experts(model, actor_routing) > 0
    replayed, _ = _actor(model, "R3", rmpad=True).compute_log_prob(data)
    drifted, _ = _actor(model, "disabled", rmpad=True).compute_log_prob(data)
    response_mask = b["response_mask"].bool()
    torch.testing.assert_close(replayed[response_mask], expected_log_probs[response_mask], rtol=1e-5, atol=1e-5)
    assert (drifted - expected_log_probs)[response_mask].abs().max() > 1e-4


def test_r3_log_prob_pass_without_a_record_names_the_key():
    with pytest.raises(ValueError, match="enable_rollout_routing_replay=true"):
        _actor(tiny_qwen3_moe(), "R3").compute_log_prob(_batch())


def test_a_dense_model_is_refused_by_the_actor_and_the_rollout():
    from tests.helpers.tiny_model import tiny_llama

    with pytest.raises(ValueError, match="not a mixture of experts"):
        _actor(tiny_llama(), "R2")
    with pytest.raises(ValueError, match="not a mixture of experts"):
        HFRollout(tiny_llama(), rollout_config(enable_rollout_routing_replay=True))


@pytest.fixture(scope="module")
def moe_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_moe")
    tiny_qwen3_moe().config.save_pretrained(folder)
    return str(folder)


def _check(overrides):
    return validate_config(load_config(overrides), check_files=False)


ARR = "actor_rollout_ref"


@pytest.mark.parametrize("overrides", [
    [f"{ARR}.actor.router_replay.mode=R2"],
    [f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true",
     f"{ARR}.rollout.mode=sync"],
    [f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true"],  # async: agent loop
])
def test_moe_configs_pass_the_pre_ray_check(moe_folder, overrides):
    cfg = _check([f"{ARR}.model.path={moe_folder}", *overrides])
    assert cfg.actor_rollout_ref.actor.router_replay.mode in ("R2", "R3")


@pytest.mark.parametrize("overrides, message", [
    ([f"{ARR}.actor.router_replay.mode=R2", f"{ARR}.model.path=DENSE"], "is not a mixture of experts"),
    ([f"{ARR}.actor.router_replay.mode=R2"], "is not a mixture of experts"),  # the default model
    ([f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.mode=sync"], "set actor_rollout_ref.rollout."
     "enable_rollout_routing_replay=true"),
    ([f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true",
      f"{ARR}.rollout.mode=sync", f"{ARR}.rollout.name=vllm", "trainer.device=cpu"], "name=vllm needs a CUDA GPU"),
    ([f"{ARR}.rollout.enable_rollout_routing_replay=true"], "only actor_rollout_ref.actor.router_replay.mode=R3"),
    ([f"{ARR}.actor.router_replay.mode=R2", "algorithm.rollout_correction.bypass_mode=true",
      f"{ARR}.rollout.calculate_log_probs=true"], "bypass_mode=true skips"),
    ([f"{ARR}.actor.router_replay.mode=R5"], "router_replay.mode='R5' is not allowed"),
    ([f"{ARR}.actor.router_replay.record_file=/tmp/r.pt"], "router_replay.record_file='/tmp/r.pt' is refused"),
    ([f"{ARR}.actor.router_replay.replay_file=/tmp/r.pt"], "router_replay.replay_file='/tmp/r.pt' is refused"),
])
def test_refusals_before_ray_name_the_key(moe_folder, tmp_path, overrides, message):
    if any(o.endswith("=DENSE") for o in overrides):
        from tests.helpers.tiny_model import tiny_llama

        tiny_llama().config.save_pretrained(tmp_path)
        overrides = [o.replace("DENSE", str(tmp_path)) for o in overrides]
    elif not any(".model.path=" in o for o in overrides) and "R2" not in " ".join(overrides):
        overrides = [f"{ARR}.model.path={moe_folder}", *overrides]
    with pytest.raises(ConfigError) as err:
        _check(overrides)
    assert message in str(err.value)
