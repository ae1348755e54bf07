"""verl.models.lora: which layers get adapters, the merged weights (against peft's own forward), adapter
folders, and the config checks of the LoRA keys (before Ray)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from verl.models import lora
from verl.trainer.config import ConfigError, load_config, validate_config

ARR = "actor_rollout_ref"
SMALL = ["trainer.n_gpus_per_node=1", f"{ARR}.actor.ppo_mini_batch_size=1", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=1",
         "critic.ppo_mini_batch_size=1", "critic.ppo_micro_batch_size_per_gpu=1", "data.train_batch_size=2",
         "trainer.logger=[]"]


def _adapted(module) -> set[str]:
    """Short names (q_proj, ...) of the layers holding a LoRA adapter."""
    return {name.split(".lora_A.")[0].rsplit(".", 1)[-1] for name, _ in module.named_parameters()
            if name.endswith("lora_A.default.weight")}


def _randomise_adapter(module, seed: int = 1) -> None:
    """B starts at zero (an identity update); give every adapter matrix random values to test the merge."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if ".lora_" in name or "modules_to_save" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.1)


def test_target_and_exclude_modules_pick_the_adapted_layers():
    everything = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert _adapted(lora.add_lora(tiny_llama(), 4, 8, "all-linear")) == everything  # never the tied lm_head
    assert _adapted(lora.add_lora(tiny_llama(), 4, 8, ["q_proj", "v_proj"])) == {"q_proj", "v_proj"}
    assert _adapted(lora.add_lora(tiny_llama(), 4, 8, "all-linear", exclude_modules=["gate_proj", "up_proj",
                                                                                      "down_proj"])) == {
        "q_proj", "k_proj", "v_proj", "o_proj"}
    peft_model = lora.add_lora(tiny_llama(), 4, 8, ["q_proj"])
    assert all(p.requires_grad == (".lora_" in n) for n, p in peft_model.named_parameters())  # base frozen


def test_bad_targets_name_the_key():
    with pytest.raises(ValueError, match=r"actor.target_modules=\['nope'\]"):
        lora.add_lora(tiny_llama(), 4, 8, ["nope"], key="actor")
    with pytest.raises(ValueError, match="lm_head, which this model ties"):
        lora.add_lora(tiny_llama(), 4, 8, ["q_proj", "lm_head"], key="actor")


@pytest.mark.parametrize("alpha", [4, 32])
def test_lora_alpha_scales_the_update_and_the_merge_equals_peft_forward(alpha):
    model = lora.add_lora(tiny_llama(), 4, alpha, "all-linear")
    _randomise_adapter(model)
    assert set(lora.lora_scalings(model).values()) == {alpha / 4}
    ids = torch.tensor([[5, 9, 17, 33, 4, 71]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        merged_state = lora.merge_lora_weights(model.state_dict(), lora.lora_scalings(model))
        plain = tiny_llama(seed=7)  # other weights, replaced by the merged ones
        plain.load_state_dict(merged_state)
        assert torch.allclose(plain(input_ids=ids).logits, expected, atol=1e-5)
        with model.disable_adapter():  # the base model: the adapter's share is alpha/r * B @ A, gone
            base = model(input_ids=ids).logits
        assert torch.allclose(base, tiny_llama()(input_ids=ids).logits, atol=1e-6)
    # the hand-computed merge of one layer: W + alpha/r * B @ A
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    hand = q.base_layer.weight + alpha / 4 * q.lora_B["default"].weight @ q.lora_A["default"].weight
    assert torch.allclose(merged_state["model.layers.0.self_attn.q_proj.weight"], hand, atol=1e-6)


def test_merged_stream_is_lazy_in_parameter_order_and_drops_saved_module_copies():
    from transformers import LlamaForTokenClassification

    from tests.helpers.tiny_model import tiny_llama_config

    critic = LlamaForTokenClassification(tiny_llama_config(num_labels=1))
    model = lora.add_lora(critic, 2, 4, ["q_proj"], modules_to_save=["score"], task_type=None)
    _randomise_adapter(model)
    names = [n for n, _ in lora.merged_named_weights(model.named_parameters(), lora.lora_scalings(model))]
    assert set(names) == set(critic.__class__(tiny_llama_config(num_labels=1)).state_dict())
    merged = dict(lora.merged_named_weights(model.named_parameters(), 0.0))  # scaling 0: the base weights
    trained_head = model.base_model.model.score.modules_to_save["default"].weight
    assert torch.equal(merged["score.weight"], trained_head)  # the trained copy, not the original
    with pytest.raises(KeyError, match="incomplete"):
        list(lora.merged_named_weights([("base_model.model.x.base_layer.weight", torch.ones(2, 2))], 1.0))
    with pytest.raises(NotImplementedError, match="only Linear adapters"):
        list(lora.merged_named_weights([("base_model.model.e.lora_embedding_A.default", torch.ones(1))], 1.0))


def _saved_adapter(tmp_path, rank=4, alpha=8):
    model = lora.add_lora(tiny_llama(), rank, alpha, ["q_proj", "v_proj"])
    _randomise_adapter(model)
    folder = lora.save_lora_adapter(str(tmp_path / "adapter"), model, model.state_dict())
    return model, folder


def test_a_saved_adapter_starts_a_model_with_the_same_outputs(tmp_path):
    model, folder = _saved_adapter(tmp_path)
    loaded = lora.load_lora_adapter(tiny_llama(), folder, 4, 8, key="m")
    ids = torch.tensor([[3, 8, 13, 21]])
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-6)
    assert any(p.requires_grad for p in loaded.parameters())  # it keeps training
    with pytest.raises(ValueError, match=r"r=4, lora_alpha=8.*m.lora_rank=8"):
        lora.load_lora_adapter(tiny_llama(), folder, 8, 8, key="m")


def test_bad_adapter_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        lora.check_adapter_folder(str(tmp_path / "missing"), "k")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="lacks"):
        lora.check_adapter_folder(str(tmp_path / "empty"), "k")
    _, folder = _saved_adapter(tmp_path)
    config = json.load(open(os.path.join(folder, lora.ADAPTER_CONFIG)))
    config["peft_type"] = "IA3"
    json.dump(config, open(os.path.join(folder, lora.ADAPTER_CONFIG), "w"))
    with pytest.raises(ValueError, match="only LoRA"):
        lora.check_adapter_folder(folder, "k")


# ---------------------------------------------------------------- config checks (before Ray)


def _problems(*overrides: str, check_files: bool = False) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(load_config([*SMALL, *overrides]), check_files=check_files)
    return info.value.problems


def test_lora_keys_are_checked_before_ray(tmp_path):
    assert any("lora_alpha=0 must be > 0" in p for p in _problems(f"{ARR}.model.lora_rank=8", f"{ARR}.model.lora_alpha=0"))
    assert any(p.startswith(f"{ARR}.model.target_modules=[]") for p in
               _problems(f"{ARR}.model.lora_rank=8", f"{ARR}.model.target_modules=[]"))
    # without lora_rank the rank is read from the adapter, so a folder that holds none is refused
    assert any(p.startswith(f"{ARR}.model.lora_adapter_path is set with {ARR}.model.lora_rank=0") and "lacks" in p
               for p in _problems(f"{ARR}.model.lora_adapter_path={tmp_path}"))
    missing = _problems(f"{ARR}.model.lora_rank=4", f"{ARR}.model.lora_alpha=8",
                        f"{ARR}.model.lora_adapter_path={tmp_path}/none", check_files=True)
    assert any(f"{ARR}.model.lora_adapter_path=" in p and "no such folder" in p for p in missing)
    _, folder = _saved_adapter(tmp_path)
    wrong_rank = _problems(f"{ARR}.model.lora_rank=16", f"{ARR}.model.lora_adapter_path={folder}", check_files=True)
    assert any("holds an adapter with r=4" in p for p in wrong_rank)
    critic = _problems("algorithm.adv_estimator=gae", "critic.model.lora_rank=4", "critic.model.lora_alpha=-1")
    assert any(p.startswith("critic.model.lora_alpha=-1") for p in critic)
    ok = validate_config(load_config([*SMALL, f"{ARR}.model.lora_rank=4", f"{ARR}.model.lora_alpha=8",
                                      f"{ARR}.model.lora_adapter_path={folder}",
                                      f"{ARR}.model.exclude_modules=[v_proj]"]), check_files=False)
    assert ok.ref_in_actor and ok.actor_rollout_ref.model.exclude_modules == ["v_proj"]


def test_an_adapter_path_without_lora_rank_trains_the_adapter_with_its_own_rank(tmp_path):
    """Upstream reads r / lora_alpha / target_modules from the adapter when lora_rank is left at 0."""
    from verl.models.lora import lora_from_model_config
    from verl.utils.config_errors import ConfigWarning

    model, folder = _saved_adapter(tmp_path, rank=4, alpha=8)
    cfg = load_config([*SMALL, f"{ARR}.model.lora_adapter_path={folder}"])
    with pytest.warns(ConfigWarning, match="the adapter's own r=4, lora_alpha=8"):
        typed = validate_config(cfg, check_files=False)
    section = typed.actor_rollout_ref.model
    assert (section.lora_rank, section.lora_alpha, sorted(section.target_modules)) == (4, 8, ["q_proj", "v_proj"])
    assert cfg.actor_rollout_ref.model.lora_rank == 4  # written back: the workers read the same values
    assert typed.ref_in_actor  # LoRA: the reference is the actor with the adapter disabled
    loaded = lora_from_model_config(tiny_llama(), section, key=f"{ARR}.model")
    ids = torch.tensor([[3, 8, 13, 21]])
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-6)
    trainable = {n for n, p in loaded.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)


def _critic_section(**keys):
    from verl.workers.config.critic import FSDPCriticModelCfg

    return FSDPCriticModelCfg(**{"lora_rank": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"], **keys})


def _tiny_critic():
    from transformers import LlamaForTokenClassification

    from tests.helpers.tiny_model import tiny_llama_config

    torch.manual_seed(0)
    return LlamaForTokenClassification(tiny_llama_config(num_labels=1))


def test_a_critic_adapter_restarts_the_critic_with_its_value_head(tmp_path):
    """critic.model.lora_adapter_path / exclude_modules (later upstream's HFModelConfig for the critic)."""
    from verl.models.lora import lora_from_model_config

    trained = lora_from_model_config(_tiny_critic(), _critic_section(exclude_modules=["v_proj"]), "critic.model",
                                     modules_to_save=["score"])
    assert _adapted(trained) == {"q_proj"}  # exclude_modules is honoured for the critic too
    _randomise_adapter(trained)
    folder = lora.save_lora_adapter(str(tmp_path / "critic_adapter"), trained, trained.state_dict())
    again = lora_from_model_config(_tiny_critic(), _critic_section(lora_adapter_path=folder), "critic.model",
                                   modules_to_save=["score"])
    ids = torch.tensor([[3, 8, 13, 21]])
    with torch.no_grad():  # eval: the token-classification head has dropout
        assert torch.allclose(again.eval()(input_ids=ids).logits, trained.eval()(input_ids=ids).logits, atol=1e-6)
    head = again.base_model.model.score.modules_to_save["default"].weight
    assert head.requires_grad  # the value head keeps training
    _, policy = _saved_adapter(tmp_path)  # a policy's adapter: no value head
    with pytest.raises(ValueError, match=r"critic.model.lora_adapter_path=.*no trained copy of \['score'\]"):
        lora_from_model_config(_tiny_critic(), _critic_section(lora_adapter_path=policy, lora_rank=4, lora_alpha=8),
                               "critic.model", modules_to_save=["score"])


def test_critic_adapter_keys_are_checked_before_ray(tmp_path):
    from verl.utils.config_errors import ConfigWarning

    gae = ("algorithm.adv_estimator=gae",)
    _, policy = _saved_adapter(tmp_path)
    wrong = _problems(*gae, "critic.model.lora_rank=4", "critic.model.lora_alpha=8",
                      f"critic.model.lora_adapter_path={policy}", check_files=True)
    assert any(p.startswith("critic.model.lora_adapter_path=") and "no trained copy of ['score']" in p for p in wrong)
    # without lora_rank the critic takes the adapter's rank, as the actor does
    with pytest.warns(ConfigWarning, match="critic.model.lora_adapter_path=.*the adapter's own r=4"):
        typed = validate_config(load_config([*SMALL, *gae, f"critic.model.lora_adapter_path={policy}"]),
                                check_files=False)
    assert (typed.critic.model.lora_rank, typed.critic.model.lora_alpha) == (4, 8)
    excluded = _problems(*gae, "critic.model.lora_rank=4", "critic.model.exclude_modules=[]")
    assert any(p.startswith("critic.model.exclude_modules=[]") for p in excluded)
