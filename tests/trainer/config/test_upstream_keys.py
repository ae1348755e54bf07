"""Upstream keys with an obvious meaning here (issue 33): each honoured with its effect, or refused naming the hardware."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import ConfigWarning, validate_config

ARR = "actor_rollout_ref"


def _validate(cfg):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        typed = validate_config(cfg, check_files=False)
    return typed, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


# ------------------------------------------------------------------ optim.clip_grad


def test_optim_clip_grad_is_the_roles_grad_clip(cfg):
    set_keys(cfg, actor_rollout_ref__actor__optim__clip_grad=0.25, critic__optim__clip_grad=0.5)
    typed, _ = _validate(cfg)
    # the workers clip the update's grad norm at grad_clip (tests/workers: the grad_clip effect)
    assert typed.actor_rollout_ref.actor.grad_clip == 0.25 and typed.critic.grad_clip == 0.5
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.25


def test_grad_clip_alone_still_works_and_two_different_values_are_refused(cfg):
    set_keys(cfg, actor_rollout_ref__actor__grad_clip=0.3)
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.actor.grad_clip == 0.3 and typed.actor_rollout_ref.actor.optim.clip_grad == 0.3
    set_keys(cfg, actor_rollout_ref__actor__optim__clip_grad=0.7)
    assert any(p.startswith(f"{ARR}.actor.optim.clip_grad=0.7 and {ARR}.actor.grad_clip=0.3") for p in problems_of(cfg))


# ------------------------------------------------------------------ actor.tau_pos / tau_neg


def _sapo_loss(actor) -> torch.Tensor:
    import verl.algos.policy_loss  # noqa: F401 - registers the losses
    from verl.algos.registry import get_policy_loss_fn

    torch.manual_seed(0)
    old = torch.randn(4, 6) * 0.1
    new = old + torch.randn(4, 6) * 0.3
    adv = torch.tensor([[1.0] * 6, [-1.0] * 6, [0.5] * 6, [-0.5] * 6])
    loss = get_policy_loss_fn("sapo")(old, new, adv, torch.ones(4, 6), "token-mean", actor)
    return loss[0] if isinstance(loss, tuple) else loss


def test_actor_tau_spelling_sets_the_sapo_temperatures(cfg):
    set_keys(cfg, actor_rollout_ref__actor__policy_loss__loss_mode="sapo")
    base, _ = _validate(cfg)
    set_keys(cfg, actor_rollout_ref__actor__tau_pos=3.0, actor_rollout_ref__actor__tau_neg=0.5)
    typed, _ = _validate(cfg)
    actor = typed.actor_rollout_ref.actor
    assert (actor.policy_loss.tau_pos, actor.policy_loss.tau_neg) == (3.0, 0.5)
    assert not torch.allclose(_sapo_loss(actor), _sapo_loss(base.actor_rollout_ref.actor))


def test_both_tau_spellings_set_policy_loss_wins_with_a_note(cfg):
    set_keys(cfg, actor_rollout_ref__actor__tau_pos=3.0, actor_rollout_ref__actor__policy_loss__tau_pos=2.0)
    typed, messages = _validate(cfg)
    assert typed.actor_rollout_ref.actor.policy_loss.tau_pos == 2.0 == typed.actor_rollout_ref.actor.tau_pos
    assert any("policy_loss value is used" in m for m in messages)


# ------------------------------------------------------------------ grpo / rloo with n = 1


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_group_estimators_with_one_response_use_the_score_itself(cfg, estimator):
    import verl.algos.advantage  # noqa: F401 - registers the estimators
    from verl.algos.registry import get_adv_estimator_fn

    set_keys(cfg, algorithm__adv_estimator=estimator, actor_rollout_ref__rollout__n=1)
    _, messages = _validate(cfg)
    (note,) = [m for m in messages if m.startswith(f"algorithm.adv_estimator={estimator} with {ARR}.rollout.n=1")]
    assert "its own score" in note
    rewards = torch.zeros(3, 4)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 0.5])
    advantages, _ = get_adv_estimator_fn(estimator)(token_level_rewards=rewards, response_mask=torch.ones(3, 4),
                                                    index=np.array(["a", "b", "c"]))
    assert torch.allclose(advantages[:, 0], torch.tensor([1.0, 0.0, 0.5]), atol=1e-5)


def test_other_group_estimators_with_one_response_stay_refused(cfg):
    set_keys(cfg, algorithm__adv_estimator="opo", actor_rollout_ref__rollout__n=1)
    assert any("algorithm.adv_estimator=opo compares the responses" in p for p in problems_of(cfg))


# ------------------------------------------------------------------ fsdp_config and friends


@pytest.mark.parametrize("section", [f"{ARR}.actor", f"{ARR}.ref", "critic.model"])
def test_fsdp_config_strategy_accepts_fsdp_and_fsdp2_and_refuses_megatron(cfg, section):
    set_keys(cfg, **{f"{section}.fsdp_config.strategy".replace(".", "__"): "fsdp2"})
    typed, _ = _validate(cfg)
    node = typed
    for part in f"{section}.fsdp_config".split("."):
        node = getattr(node, part)
    assert node.strategy == "fsdp2"
    set_keys(cfg, **{f"{section}.fsdp_config.strategy".replace(".", "__"): "megatron"})
    assert any(p.startswith(f"{section}.fsdp_config.strategy") and "Megatron" in p for p in problems_of(cfg))


def test_fsdp1_options_and_worker_impl_are_accepted_with_a_note(cfg):
    set_keys(cfg, actor_rollout_ref__actor__fsdp_config__use_orig_params=True,
             actor_rollout_ref__ref__fsdp_config__forward_prefetch=True,
             actor_rollout_ref__ref__use_torch_compile=True, trainer__use_legacy_worker_impl="disable")
    typed, messages = _validate(cfg)
    expected = [f"{ARR}.actor.fsdp_config.use_orig_params=true is an FSDP1 option",
                f"{ARR}.ref.fsdp_config.forward_prefetch=true is an FSDP1 option",
                "trainer.use_legacy_worker_impl=disable selects upstream's engine-based workers"]
    for start in expected:
        (line,) = [m for m in messages if m.startswith(start)]
        assert "\n" not in line
    # ref.use_torch_compile is built now (tests/workers/actor/test_entropy_compile.py): taken without a note
    assert typed.actor_rollout_ref.ref.use_torch_compile and not any("use_torch_compile" in m for m in messages)
    for value in ("auto", "enable"):
        set_keys(cfg, trainer__use_legacy_worker_impl=value)
        _validate(cfg)
    set_keys(cfg, trainer__use_legacy_worker_impl="sometimes")
    assert any(p.startswith("trainer.use_legacy_worker_impl") for p in problems_of(cfg))


@pytest.mark.parametrize(("written", "word"), [(False, "disable"), (True, "enable")])
def test_worker_impl_written_as_a_bool_runs_as_its_word_with_a_warning(cfg, written, word):
    set_keys(cfg, trainer__use_legacy_worker_impl=written)
    typed, messages = _validate(cfg)
    assert typed.trainer.use_legacy_worker_impl == word
    assert cfg.trainer.use_legacy_worker_impl == word  # the composed config the workers read says the same
    assert any(m.startswith(f"trainer.use_legacy_worker_impl={str(written).lower()} is older upstream's bool")
               for m in messages)


@pytest.mark.parametrize("key", ["data_parallel_size", "expert_parallel_size"])
def test_rollout_parallel_sizes_above_one_are_refused_naming_the_hardware(cfg, key):
    set_keys(cfg, **{f"actor_rollout_ref__rollout__{key}": 1})
    _validate(cfg)
    set_keys(cfg, **{f"actor_rollout_ref__rollout__{key}": 2})
    (problem,) = [p for p in problems_of(cfg) if p.startswith(f"{ARR}.rollout.{key}")]
    assert "several GPUs" in problem


# ------------------------------------------------------------------ model.use_shm


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_use_shm_loads_the_model_from_a_dev_shm_copy(cfg, tmp_path, monkeypatch):
    from verl.models import loader
    from verl.trainer.ppo.launcher import resolve_model_paths

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"weights")
    root = f"/dev/shm/verl-test-{os.getpid()}"
    monkeypatch.setattr(loader, "SHM_ROOT", root)
    try:
        set_keys(cfg, actor_rollout_ref__model__path=str(model), actor_rollout_ref__model__use_shm=True)
        typed, _ = _validate(cfg)
        resolve_model_paths(typed)
        copied = Path(typed.actor_rollout_ref.model.path)
        assert copied.parent == Path(root) and (copied / "model.safetensors").read_bytes() == b"weights"
        assert typed.critic.model.path == str(model)  # the critic has its own path, as upstream
        # unchanged source: the same copy is reused
        again, _ = _validate(set_keys(cfg, actor_rollout_ref__model__path=str(model)))
        resolve_model_paths(again)
        assert again.actor_rollout_ref.model.path == str(copied)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_use_shm_on_several_nodes_is_refused(cfg):
    set_keys(cfg, actor_rollout_ref__model__use_shm=True, trainer__nnodes=2)
    assert any(p.startswith(f"{ARR}.model.use_shm=true copies the model to /dev/shm") for p in problems_of(cfg))


def test_layered_summon_is_accepted_with_a_note_saying_the_sync_already_streams(cfg, monkeypatch):
    from tests.helpers.tiny_model import tiny_llama
    from verl.workers.sharding_manager import fsdp_vllm

    set_keys(cfg, actor_rollout_ref__rollout__layered_summon=True)
    typed, messages = _validate(cfg)
    assert typed.actor_rollout_ref.rollout.layered_summon
    (line,) = [m for m in messages if m.startswith(f"{ARR}.rollout.layered_summon=true")]
    assert "parameter by parameter" in line
    # what the note promises: while the engine takes the k-th weight, at most k + 3 gathers have been started
    # (two in flight beyond the one handed over), never the whole model
    started: list[str] = []
    real = fsdp_vllm._Gathered
    monkeypatch.setattr(fsdp_vllm, "_Gathered", lambda param, dtype: started.append(1) or real(param, dtype))
    model = tiny_llama()
    total = len(list(model.parameters()))
    ahead = [len(started) - k for k, _ in enumerate(fsdp_vllm.full_named_weights(model, None, tied_lm_head=True))]
    assert len(ahead) >= total > 3 and max(ahead) <= 3


def test_sglang_only_rollout_keys_are_noted_or_refused(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__update_weights_bucket_megabytes=1024)
    typed, messages = _validate(cfg)
    assert typed.actor_rollout_ref.rollout.update_weights_bucket_megabytes == 1024
    (line,) = [m for m in messages if m.startswith(f"{ARR}.rollout.update_weights_bucket_megabytes=1024")]
    assert "in process" in line
    set_keys(cfg, actor_rollout_ref__rollout__update_weights_bucket_megabytes=512,
             actor_rollout_ref__rollout__multi_stage_wake_up=True)
    (problem,) = [p for p in problems_of(cfg) if p.startswith(f"{ARR}.rollout.multi_stage_wake_up")]
    assert "SGLang" in problem and "multi_stage_wake_up=false" in problem
