"""actor_rollout_ref.ref.router_replay.mode (upstream v0.7's ref section is an actor config): the reference pass of a
tiny Qwen3-MoE replays the batch's routed_experts (recorded by the actor's R2 old-log-prob pass, or the rollout's for
R3) instead of routing by itself; it never records; and the pre-Ray refusals."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch
from tests.helpers.tiny_moe import ExpertsSpy, perturb_unused_experts, tiny_qwen3_moe
from tests.helpers.typed_config import typed_section
from tests.workers.actor.test_dp_actor import actor_config
from verl.models.router_replay import ROUTED_EXPERTS_KEY
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.actor import DataParallelPPOActor
from verl.workers.config import RefConfig

ARR = "actor_rollout_ref"


def _ref(model, mode, rmpad=False):
    config = typed_section(RefConfig, {"use_remove_padding": rmpad, "router_replay.mode": mode,
                                       "log_prob_micro_batch_size_per_gpu": 2})
    return DataParallelPPOActor(config, model)


@pytest.mark.parametrize("mode", ["R2", "R3"])
@pytest.mark.parametrize("rmpad", [False, True])
def test_the_reference_pass_replays_the_batchs_routing(mode, rmpad):
    policy = tiny_qwen3_moe()
    data = rollout_batch([6, 2, 5, 4], [5, 1, 3, 5], meta_info={"micro_batch_size": 2})
    recorder = DataParallelPPOActor(actor_config(use_remove_padding=rmpad, **{"router_replay.mode": "R2"}), policy)
    recorded_log_probs, _ = recorder.compute_log_prob(data)
    data.batch[ROUTED_EXPERTS_KEY] = recorder.last_routed_experts  # as the old-log-prob pass (R2) / rollout (R3)

    # the reference's own module (loaded apart, as the worker's is): the policy's weights, but its native routing
    # now differs from the recorded one
    reference, unreplayed = tiny_qwen3_moe(), tiny_qwen3_moe()
    for model in (reference, unreplayed):
        assert perturb_unused_experts(model, data.batch[ROUTED_EXPERTS_KEY]) > 0
    own, _ = _ref(unreplayed, "disabled", rmpad).compute_log_prob(data)
    assert not torch.allclose(own, recorded_log_probs, atol=1e-5)  # routing by itself changes the scores

    ref = _ref(reference, mode, rmpad)
    spy = ExpertsSpy(reference)
    replayed, _ = ref.compute_log_prob(data)
    torch.testing.assert_close(replayed, recorded_log_probs, rtol=1e-5, atol=1e-6)  # the policy's experts
    mask = data.batch["attention_mask"].bool()
    for micro in range(2):  # two micro-batches of two rows: the experts ran with the recorded choice
        rows = slice(2 * micro, 2 * micro + 2)
        expected = data.batch[ROUTED_EXPERTS_KEY][rows][mask[rows]]
        used = spy.stacked(micro) if rmpad else spy.stacked(micro)[mask[rows].reshape(-1)]
        assert torch.equal(used.long(), expected.long())
    assert ref.last_routed_experts is None  # the reference never records, whatever the mode


def test_the_reference_pass_without_routed_experts_names_the_key():
    data = rollout_batch([3, 3], [2, 2], meta_info={"micro_batch_size": 2})
    with pytest.raises(ValueError, match=r"ref.router_replay.mode=R3 replays the batch key 'routed_experts'"):
        _ref(tiny_qwen3_moe(), "R3").compute_log_prob(data)


@pytest.fixture(scope="module")
def moe_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_moe_ref")
    tiny_qwen3_moe().config.save_pretrained(folder)
    return str(folder)


def _check(*overrides):
    return validate_config(load_config(list(overrides)), check_files=False)


def test_the_ref_mode_must_be_the_actors_and_the_reference_must_exist(moe_folder):
    kl = f"{ARR}.actor.use_kl_loss=true"
    cfg = _check(f"{ARR}.model.path={moe_folder}", kl, f"{ARR}.actor.router_replay.mode=R2",
                 f"{ARR}.ref.router_replay.mode=R2")
    assert cfg.actor_rollout_ref.ref.router_replay.mode == "R2"
    for overrides, message in [
        ([kl, f"{ARR}.actor.router_replay.mode=R2", f"{ARR}.ref.router_replay.mode=R3"],
         f"set {ARR}.ref.router_replay.mode=disabled, or {ARR}.actor.router_replay.mode=R3"),
        ([f"{ARR}.actor.router_replay.mode=R2", f"{ARR}.ref.router_replay.mode=R2"], "has no reference policy"),
        ([kl, f"{ARR}.actor.router_replay.mode=R2", f"{ARR}.ref.router_replay.mode=R2", f"{ARR}.model.lora_rank=4"],
         "the reference pass is the actor's module"),
        ([kl, f"{ARR}.ref.router_replay.record_file=/tmp/r.pt"], "ref.router_replay.record_file='/tmp/r.pt' is refused"),
    ]:
        with pytest.raises(ConfigError) as err:
            _check(f"{ARR}.model.path={moe_folder}", *overrides)
        assert message in str(err.value), overrides
