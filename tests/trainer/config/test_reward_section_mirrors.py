"""Upstream v0.7's `reward:` section is declared (reward/reward.yaml): each leaf mirrors the key the run uses, and
a leaf a user's yaml sets sets that key (reward_section.fold_reward_section), after which the section mirrors again.
v0.7's legacy spellings (top-level `sandbox_fusion`, `reward_model.rollout.<judge engine key>`) are declared null."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.trainer.config.test_reward_section import compose_user_yaml, typed
from verl.trainer.config import ConfigError, validate_config
from verl.trainer.config.reward_section import CLASS_NAME, REFUSED_ROLLOUT, v07_key
from verl.trainer.config.yaml_files import GENERATED, walk_keys
from verl.utils.config_errors import ConfigWarning

JUDGE_ON = ("reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.rollout.name=vllm")
# each case: the leaves a user's yaml writes under `reward:` (distinct from every default), as one nested dict
CASES = {
    "workers": {"num_workers": 3, "max_concurrency_per_worker": 2},
    "function": {"custom_reward_function": {"path": "/r.py", "name": "score"}},
    "registered_manager": {"reward_manager": {"name": "dapo"}},
    "importlib_manager": {"reward_manager": {"source": "importlib", "name": "Mine", "module": {"path": "/m.py"}}},
    "pool": {"reward_model": {"enable": True, "model_path": "/rm", "enable_resource_pool": True,
                              "n_gpus_per_node": 2, "nnodes": 1}},
    "judge_engine": {"reward_model": {"enable": True, "model_path": "/rm", "rollout": {
        "name": "vllm", "dtype": "float32", "gpu_memory_utilization": 0.3, "enforce_eager": False,
        "max_num_batched_tokens": 4096, "max_model_len": 900, "max_num_seqs": 7, "load_format": "safetensors",
        "enable_chunked_prefill": False, "enable_prefix_caching": False, "disable_log_stats": False,
        "prompt_length": 512, "response_length": 256, "scheduling_policy": "priority",
        "engine_kwargs": {"vllm": {"swap_space": 1}}}}},
    "sandbox": {"sandbox_fusion": {"url": "http://s/run_code", "max_concurrent": 3, "memory_limit_mb": 512}},
}


def _leaves(section: dict) -> dict[str, object]:
    return {k: v for k, v in walk_keys(section) if not isinstance(v, dict)}


def shipped_reward_leaves() -> set[str]:
    shipped = OmegaConf.to_container(OmegaConf.load(GENERATED).reward)
    return {k for k, v in walk_keys(shipped) if not isinstance(v, dict) or not v}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_leaf_a_user_yaml_sets_sets_our_key_and_the_section_mirrors_it(tmp_path, case):
    body = OmegaConf.to_yaml({"reward": CASES[case]})
    cfg = compose_user_yaml(tmp_path, body)
    got = validate_config(cfg, check_files=False)
    importlib = CASES[case].get("reward_manager", {}).get("source") == "importlib"
    for leaf, value in _leaves(CASES[case]).items():
        # with source=importlib, name is the class in module.path (upstream's loader reads it as the object name)
        ours = CLASS_NAME if importlib and leaf == "reward_manager.name" else v07_key(f"reward.{leaf}")[1]
        assert OmegaConf.select(cfg, ours) == value, (leaf, ours)  # the key the run reads
        assert OmegaConf.select(cfg, f"reward.{leaf}") == value, leaf  # the mirror, read from the config
        assert OmegaConf.select(OmegaConf.structured(got.reward.to_dict()), leaf) == value, leaf  # and typed
    assert OmegaConf.is_interpolation(cfg.reward, "num_workers")  # the section is the shipped mirrors again


def test_every_leaf_v07_declares_has_a_case_or_is_refused_or_fixed():
    """The cases above write every settable leaf of the declared section (so each mirror is shown both ways)."""
    written = {leaf for case in CASES.values() for leaf in _leaves(case)}
    fixed = {"_target_", "reward_manager._target_", "reward_manager.module._target_", "reward_model._target_",
             "reward_manager.module.name",  # the imported module's name: nothing reads it (a note when given)
             "reward_model.rollout._target_", "sandbox_fusion._target_",
             "reward_model.rollout.tensor_model_parallel_size"}  # 1 only: NO_GENRM_TP
    refused = {f"reward_model.rollout.{k}" for k in REFUSED_ROLLOUT}  # JUDGE_KEY_REFUSALS
    settable = shipped_reward_leaves() - fixed - refused
    written_leaves = {w if not w.startswith("reward_model.rollout.engine_kwargs.") else
                      "reward_model.rollout.engine_kwargs" for w in written}
    # v0.7's default false is this schema's "unset" in a yaml (a copied section), and true is the engine's own: the
    # command line sets it (test_the_command_line_spelling_reads_back_from_the_section)
    assert settable == written_leaves | {"reward_model.rollout.skip_tokenizer_init"}
    assert all(v07_key(f"reward.{leaf}") is not None for leaf in settable)


def test_unset_leaves_read_as_the_values_the_run_uses():
    got = typed("reward_model.num_workers=5", "reward_model.use_reward_loop=true", "reward_model.model.path=/rm",
                *JUDGE_ON, "+reward_model.rollout.engine_kwargs.vllm.max_num_seqs=9")
    assert got.reward.num_workers == 5 and got.reward.reward_model.model_path == "/rm"
    assert got.reward.max_concurrency_per_worker == got.reward_model.max_concurrency_per_worker == 1
    assert got.reward.reward_model.rollout.max_num_seqs == 9
    # unset vLLM arguments read as what the judge engine starts with (verl.workers.genrm_engine.vllm_judge_config)
    from transformers import Qwen2Config

    from verl.workers.genrm_engine import vllm_judge_config
    from verl.workers.rollout.vllm.engine import engine_kwargs

    hf = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, vocab_size=100)
    started = engine_kwargs(vllm_judge_config(typed().reward_model), "/rm", hf, seed=0, engines_per_node=1)
    mirror = typed().reward.reward_model.rollout
    for key in ("enforce_eager", "max_num_batched_tokens", "max_num_seqs", "load_format", "enable_chunked_prefill",
                "disable_log_stats", "skip_tokenizer_init"):
        assert getattr(mirror, key) == started[key], key


def test_the_command_line_spelling_reads_back_from_the_section():
    got = typed("reward.num_workers=3", "reward.reward_model.rollout.max_num_seqs=7",
                "reward.reward_model.rollout.skip_tokenizer_init=false", *JUDGE_ON)
    assert got.reward.num_workers == got.reward_model.num_workers == 3
    assert got.reward.reward_model.rollout.max_num_seqs == 7
    assert got.reward_model.rollout.engine_kwargs["vllm"]["skip_tokenizer_init"] is False
    assert got.reward.reward_model.rollout.skip_tokenizer_init is False


def test_legacy_keys_are_folded_and_read_null_afterwards(tmp_path):
    body = ("sandbox_fusion:\n  url: http://s/run_code\n  memory_limit_mb: 256\nreward_model:\n  enable: true\n"
            "  use_reward_loop: true\n  model:\n    path: /rm\n  rollout:\n    name: vllm\n    enforce_eager: false\n"
            "    max_num_batched_tokens: 4096\n    max_model_len: 900\n    max_num_seqs: 7\n"
            "    load_format: safetensors\n    enable_chunked_prefill: false\n    disable_log_stats: false\n"
            "    skip_tokenizer_init: false\n")
    cfg = compose_user_yaml(tmp_path, body)
    got = validate_config(cfg, check_files=False)
    assert got.reward_model.sandbox_fusion.url == "http://s/run_code" and got.reward_model.sandbox_fusion.memory_limit_mb == 256
    assert got.sandbox_fusion.url is None and got.reward_model.rollout.enforce_eager is None
    assert dict(got.reward_model.rollout.engine_kwargs["vllm"]) == {
        "enforce_eager": False, "max_num_batched_tokens": 4096, "max_model_len": 900, "max_num_seqs": 7,
        "load_format": "safetensors", "enable_chunked_prefill": False, "disable_log_stats": False,
        "skip_tokenizer_init": False}
    assert got.reward.reward_model.rollout.max_model_len == 900  # and the v0.7 section reads them


@pytest.mark.parametrize("target", ["verl.workers.config.reward.RewardManagerConfig", "my.Own"])
def test_a_target_in_the_section_is_upstreams_or_refused(tmp_path, target):
    cfg = compose_user_yaml(tmp_path, f"reward:\n  reward_manager:\n    _target_: {target}\n")
    if target.startswith("verl."):  # later upstream's spelling of the same class
        validate_config(cfg, check_files=False)
        return
    with pytest.raises(ConfigError, match=r"reward.reward_manager._target_='my.Own' \(your yaml\)"):
        validate_config(cfg, check_files=False)



def test_a_copied_section_at_v07s_defaults_keeps_ours_and_says_so(tmp_path):
    """upstream's own reward.yaml copied whole: its defaults that are not this schema's are named, not applied."""
    body = ("reward:\n  max_concurrency_per_worker: 16\n  reward_model:\n    n_gpus_per_node: 8\n    rollout:\n"
            "      skip_tokenizer_init: false\n      enforce_eager: true\n")
    cfg = compose_user_yaml(tmp_path, body)
    with pytest.warns(ConfigWarning) as seen:
        got = validate_config(cfg, check_files=False)
    message = str(seen[0].message)
    assert "reward.max_concurrency_per_worker=16 (v0.7's default) is taken as unset: the run uses 1" in message
    assert "reward.reward_model.n_gpus_per_node=8" in message
    assert "reward.reward_model.rollout.skip_tokenizer_init=False (v0.7's default) is taken as unset: the run uses " \
           "True" in message
    assert "enforce_eager" not in message  # v0.7's default is the run's too
    assert got.reward_model.max_concurrency_per_worker == 1 and got.reward.reward_model.n_gpus_per_node == 0


def test_the_judges_tensor_parallel_size_is_refused_in_either_spelling():
    for line in ("reward.reward_model.rollout.tensor_model_parallel_size=2",
                 "reward_model.rollout.tensor_model_parallel_size=2"):
        with pytest.raises(ConfigError, match="reward_model.rollout.tensor_model_parallel_size=2 is refused"):
            typed(line, *JUDGE_ON)
    assert typed().reward.reward_model.rollout.tensor_model_parallel_size == 1


def test_a_typed_config_composes_again_with_its_mirrors_and_python_edits():
    """verl.config(typed): the reward section's plain values are mirrors, not settings; an edit in Python of one
    mirror is a setting, and an edit of the key a mirror follows is not undone by the stale mirror."""
    import verl

    cfg = verl.config(["reward_model.use_reward_loop=true"])
    assert verl.config(cfg) == cfg  # the section's plain values (skip_tokenizer_init true, ...) write nothing
    cfg.custom_reward_function.name = "score"  # the mirror cfg.reward.custom_reward_function.name is now stale
    again = verl.config(cfg)
    assert again.custom_reward_function.name == again.reward.custom_reward_function.name == "score"
    again.reward.num_workers = 4  # upstream v0.7's spelling, edited in Python
    edited = verl.config(again)
    assert edited.reward_model.num_workers == edited.reward.num_workers == 4


def test_the_section_is_typed_as_upstreams_classes_at_their_paths():
    from verl.trainer.config import config as older_module
    from verl.trainer.config.config import ModuleConfig
    from verl.workers.config import RewardConfig, RewardManagerConfig

    assert older_module.RewardManagerConfig is RewardManagerConfig  # upstream v0.7 names both paths

    got = typed().reward
    assert type(got) is RewardConfig and type(got.reward_manager) is RewardManagerConfig
    assert type(got.reward_manager.module) is ModuleConfig
    assert got["reward_manager"]["name"] == got.reward_manager.name == "naive"  # attribute and mapping access


def test_a_python_edit_under_a_mirrored_section_is_set():
    """cfg.reward...engine_kwargs is one mirror (an interpolation of the whole section): an entry added under it
    in Python reaches reward_model.rollout.engine_kwargs, not dropped with the mirror."""
    import verl

    cfg = verl.config(["reward_model.use_reward_loop=true", *JUDGE_ON])
    cfg.reward.reward_model.rollout.engine_kwargs["vllm"]["swap_space"] = 1
    got = verl.config(cfg)
    assert dict(got.reward_model.rollout.engine_kwargs["vllm"]) == {"swap_space": 1}
