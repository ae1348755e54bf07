"""``*.model.override_config.attn_implementation``: the loader builds the model with that attention kernel (it is a
from_pretrained argument, not a config attribute), and flash attention is refused before Ray where its package is
not importable (CUDA-only; never on this CPU box)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.tiny_model import tiny_llama
from tests.trainer.config.test_key_effects import problems, typed

ARR = "actor_rollout_ref"


@pytest.mark.parametrize("section", [f"{ARR}.model", "critic.model"])
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_attn_implementation_is_the_loaded_models(tmp_path, section, impl):
    from verl.models.loader import load_causal_lm

    tiny_llama().save_pretrained(tmp_path)  # without the key transformers loads sdpa, so eager shows the key works
    config = typed(f"{ARR}.model.path={tmp_path}", f"critic.model.path={tmp_path}", "algorithm.adv_estimator=gae",
                   f"+{section}.override_config.attn_implementation={impl}")
    model = config.critic.model if section == "critic.model" else config.actor_rollout_ref.model
    module, _ = load_causal_lm(model, section, value_head=section == "critic.model")
    assert module.config._attn_implementation == impl


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_is_refused_where_flash_attn_is_missing():
    (message,) = problems(f"+{ARR}.model.override_config.attn_implementation=flash_attention_2")
    assert f"{ARR}.model.override_config.attn_implementation=flash_attention_2 is refused" in message
    assert "'flash_attn' package" in message and "Leave it unset (sdpa" in message


def test_unknown_attn_implementation_is_refused():
    (message,) = problems("algorithm.adv_estimator=gae", "+critic.model.override_config.attn_implementation=fast")
    assert "critic.model.override_config.attn_implementation='fast' is not one of" in message
