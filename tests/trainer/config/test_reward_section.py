"""Upstream v0.7's `reward:` section (and its legacy top-level `sandbox_fusion:`) is this schema's reward keys, as one
setting: on the command line (aliases.rewrite_aliases) and in a user's own yaml (reward_section.fold_reward_section)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hydra import compose, initialize_config_dir

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.reward_manager.conftest import make_batch
from tests.workers.reward_manager.test_reward_loop_keys import GATE, SAMPLES, _gate_state
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.trainer.config.aliases import rewrite_aliases
from verl.trainer.config.reward_section import fold_plan
from verl.trainer.ppo.reward import compute_reward, load_reward_manager


def typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def reward_part(cfg):
    return cfg.reward_model, cfg.custom_reward_function


LOOP = "reward_model.use_reward_loop=true"
# (v0.7's spelling, ours): each pair must build the same typed reward config
PAIRS = [
    (["reward.num_workers=3"], ["reward_model.num_workers=3", LOOP]),
    (["reward.max_concurrency_per_worker=4"], ["reward_model.max_concurrency_per_worker=4", LOOP]),
    (["reward.custom_reward_function.path=/r.py", "reward.custom_reward_function.name=score"],
     ["custom_reward_function.path=/r.py", "custom_reward_function.name=score"]),
    (["reward.reward_manager.name=dapo", "+reward.reward_kwargs.max_resp_len=8"],
     ["reward_model.reward_manager=dapo", "+reward_model.reward_kwargs.max_resp_len=8"]),
    # with source=importlib, v0.7's name is the class in module.path (its loader's object_name)
    (["reward.reward_manager.source=importlib", "reward.reward_manager.module.path=/m.py",
      "reward.reward_manager.name=Mine"],
     ["reward_model.reward_loop_source=importlib", "reward_model.reward_loop_module_path=/m.py",
      "reward_model.reward_loop_class_name=Mine", LOOP]),
    # module.name only names the imported module: nothing reads it (a note), the class still comes from name
    (["reward.reward_manager.source=importlib", "reward.reward_manager.module.path=/m.py",
      "reward.reward_manager.module.name=my_module", "reward.reward_manager.name=Mine"],
     ["reward_model.reward_loop_source=importlib", "reward_model.reward_loop_module_path=/m.py",
      "reward_model.reward_loop_class_name=Mine", LOOP]),
    (["reward.reward_model.enable=true", "reward.reward_model.model_path=/rm", "reward.reward_model.nnodes=1",
      "reward.reward_model.n_gpus_per_node=2", "reward.reward_model.enable_resource_pool=true"],
     ["reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.nnodes=1",
      "reward_model.n_gpus_per_node=2", "reward_model.enable_resource_pool=true"]),
    (["reward.reward_model.enable=true", "reward.reward_model.model_path=/rm", "reward.reward_model.rollout.name=vllm",
      "reward.reward_model.rollout.gpu_memory_utilization=0.3", "reward.reward_model.rollout.prompt_length=512",
      "reward.reward_model.rollout.response_length=256", "reward.reward_model.rollout.dtype=float32",
      "reward.reward_model.rollout.enable_prefix_caching=false",
      "reward.reward_model.rollout.enforce_eager=false", "reward.reward_model.rollout.max_num_seqs=7"],
     ["reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.rollout.name=vllm",
      "reward_model.rollout.gpu_memory_utilization=0.3", "reward_model.rollout.prompt_length=512",
      "reward_model.rollout.response_length=256", "reward_model.rollout.dtype=float32",
      "reward_model.rollout.enable_prefix_caching=false",
      "+reward_model.rollout.engine_kwargs.vllm.enforce_eager=false",
      "+reward_model.rollout.engine_kwargs.vllm.max_num_seqs=7", LOOP]),
    (["reward.sandbox_fusion.url=http://s/run_code", "reward.sandbox_fusion.max_concurrent=3",
      "reward.sandbox_fusion.memory_limit_mb=512"],
     ["reward_model.sandbox_fusion.url=http://s/run_code", "reward_model.sandbox_fusion.max_concurrent=3",
      "reward_model.sandbox_fusion.memory_limit_mb=512"]),
    # v0.7's deprecated legacy spellings: the top-level sandbox_fusion block, the judge-engine keys we lack
    (["sandbox_fusion.url=http://s/run_code", "sandbox_fusion.max_concurrent=5"],
     ["reward_model.sandbox_fusion.url=http://s/run_code", "reward_model.sandbox_fusion.max_concurrent=5"]),
]


@pytest.mark.parametrize(("v07", "ours"), PAIRS, ids=[p[0][0].split("=")[0] for p in PAIRS])
def test_each_v07_spelling_builds_the_same_typed_config_as_ours(v07, ours):
    assert reward_part(typed(*v07)) == reward_part(typed(*ours))
    assert reward_part(typed(*v07)) != reward_part(typed())  # and it changed something


def test_a_v07_judge_engine_key_reaches_vllm_llm():
    from transformers import Qwen2Config

    from verl.workers.genrm_engine import vllm_judge_config
    from verl.workers.rollout.vllm.engine import engine_kwargs

    cfg = typed("reward.reward_model.enable=true", "reward.reward_model.model_path=/rm",
                "reward.reward_model.rollout.name=vllm", "reward.reward_model.rollout.enforce_eager=false",
                "reward_model.rollout.max_num_seqs=7")  # v0.7's legacy block spells it without `reward.`
    hf = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, vocab_size=100)
    kwargs = engine_kwargs(vllm_judge_config(cfg.reward_model), "/rm", hf, seed=0, engines_per_node=1)
    assert kwargs["enforce_eager"] is False and kwargs["max_num_seqs"] == 7


def test_both_spellings_with_different_values_are_refused():
    assert rewrite_aliases(["reward.num_workers=3", "reward_model.num_workers=3"])  # the same value twice is fine
    with pytest.raises(ConfigError, match=r"set the same key \(reward_model.num_workers\)"):
        rewrite_aliases(["reward.num_workers=3", "reward_model.num_workers=4"])
    with pytest.raises(ConfigError, match=r"set the same key \(reward_model.model.path\)"):
        rewrite_aliases(["reward.reward_model.model_path=/a", "reward_model.model.path=/b"])
    with pytest.raises(ConfigError, match=r"set the same key \(reward_model.sandbox_fusion.url\)"):
        rewrite_aliases(["sandbox_fusion.url=a", "reward.sandbox_fusion.url=b"])


def test_a_loop_key_with_the_loop_switched_off_is_refused():
    with pytest.raises(ConfigError, match="reward.num_workers is read by the reward loop, which upstream v0.7 always "
                                          "runs; it cannot be given with reward_model.use_reward_loop=false"):
        rewrite_aliases(["reward.num_workers=3", "reward_model.use_reward_loop=false"])
    # keys read by either path leave the switch alone
    assert typed("reward.custom_reward_function.path=/r.py").reward_model.use_reward_loop is False


@pytest.mark.parametrize("key", ["reward.reward_model.rollout.free_cache_engine=false",
                                 "reward.reward_model.rollout.data_parallel_size=2",
                                 "reward_model.rollout.limit_images=2"])
def test_v07_judge_keys_without_a_counterpart_are_refused(key):
    with pytest.raises(ConfigError, match="has no counterpart here"):
        rewrite_aliases([key])


# ---------------------------------------------------------------- a user's yaml

USER_YAML = """\
hydra:
  searchpath:
    - pkg://verl.trainer.config
defaults:
  - ppo_trainer
  - _self_
"""
# upstream v0.7's whole reward: section, as its ppo_trainer.yaml has it, with a few keys changed
V07_SECTION = """\
sandbox_fusion:
  url: http://s/run_code
  max_concurrent: null
  memory_limit_mb: null
reward:
  num_workers: 3
  max_concurrency_per_worker: 16
  custom_reward_function:
    path: /r.py
    name: compute_score
  reward_manager:
    _target_: verl.workers.config.reward_model.RewardManagerConfig
    source: register
    name: dapo
    module:
      _target_: verl.trainer.config.config.ModuleConfig
      path: null
      name: custom_reward_manager
  reward_model:
    enable: false
    enable_resource_pool: false
    n_gpus_per_node: 8
    nnodes: 0
    model_path: null
    rollout:
      _target_: verl.workers.config.RolloutConfig
      name: ???
      dtype: bfloat16
      gpu_memory_utilization: 0.5
      enforce_eager: true
      cudagraph_capture_sizes: null
      free_cache_engine: true
      data_parallel_size: 1
      expert_parallel_size: 1
      tensor_model_parallel_size: 2
      max_num_batched_tokens: 8192
      max_model_len: null
      max_num_seqs: 1024
      load_format: auto
      engine_kwargs: {}
      limit_images: null
      enable_chunked_prefill: true
      enable_prefix_caching: true
      disable_log_stats: true
      skip_tokenizer_init: false
      prompt_length: 2048
      response_length: 2048
  sandbox_fusion:
    url: null
    max_concurrent: 64
    memory_limit_mb: 1024
"""
SAME_ON_THE_COMMAND_LINE = ["sandbox_fusion.url=http://s/run_code", "reward.num_workers=3",
                            "reward.custom_reward_function.path=/r.py", "reward.reward_manager.name=dapo"]


def compose_user_yaml(folder, body: str, *overrides: str):
    (folder / "mine.yaml").write_text(USER_YAML + body)
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="mine", overrides=list(overrides))


def test_a_user_yaml_with_v07s_reward_section_composes_like_the_command_line(tmp_path):
    cfg = compose_user_yaml(tmp_path, V07_SECTION)
    got = validate_config(cfg, check_files=False)
    # folded onto our keys: the reward section mirrors them again, the legacy top-level block is null
    assert cfg.reward.num_workers == 3 and cfg.reward.reward_manager.name == "dapo"
    assert cfg.reward.max_concurrency_per_worker == 1  # v0.7's default 16, copied with the section: ours stays
    assert dict(cfg.sandbox_fusion) == {"url": None, "max_concurrent": None, "memory_limit_mb": None}
    assert got.reward.sandbox_fusion.url == "http://s/run_code" and got.sandbox_fusion.url is None
    # keys left at v0.7's defaults keep ours (n_gpus_per_node 8, tensor_model_parallel_size 2, ...)
    assert reward_part(got) == reward_part(typed(*SAME_ON_THE_COMMAND_LINE))
    assert got.reward_model.use_reward_loop is True  # reward.num_workers is the loop's: v0.7 always runs it
    assert got.reward_model.num_workers == 3 and got.reward_model.sandbox_fusion.url == "http://s/run_code"


def test_a_user_yaml_setting_both_spellings_differently_is_refused(tmp_path):
    cfg = compose_user_yaml(tmp_path, "reward:\n  num_workers: 3\nreward_model:\n  num_workers: 5\n")
    with pytest.raises(ConfigError, match=r"reward.num_workers=3 \(upstream v0.7's spelling, your yaml\) and "
                                          r"reward_model.num_workers=5 set the same key"):
        validate_config(cfg, check_files=False)


def test_a_user_yaml_refuses_a_key_v07_does_not_have(tmp_path):
    cfg = compose_user_yaml(tmp_path, "reward:\n  num_wrokers: 3\n")
    with pytest.raises(ConfigError, match="reward.num_wrokers .* is not a key of upstream v0.7's reward section"):
        validate_config(cfg, check_files=False)


def test_a_user_yaml_with_v07s_legacy_judge_engine_keys(tmp_path):
    body = ("reward_model:\n  enable: true\n  use_reward_loop: true\n  model:\n    path: /rm\n  rollout:\n"
            "    name: vllm\n    enforce_eager: false\n    max_model_len: null\n    limit_images: null\n")
    cfg = compose_user_yaml(tmp_path, body)
    got = validate_config(cfg, check_files=False)
    assert dict(got.reward_model.rollout.engine_kwargs["vllm"]) == {"enforce_eager": False}  # null: unset
    cfg = compose_user_yaml(tmp_path, "reward_model:\n  rollout:\n    data_parallel_size: 2\n")
    with pytest.raises(ConfigError, match="reward_model.rollout.data_parallel_size is upstream v0.7's judge-engine"):
        validate_config(cfg, check_files=False)


def test_the_command_line_wins_over_the_yamls_reward_section():
    """In a Hydra app the command line's keys (already in our spelling) override the yaml's, as Hydra does."""
    values = {"reward_model.num_workers": 2, "reward_model.use_reward_loop": True}
    writes, problems = fold_plan({"reward": {"num_workers": 3}}, values.get, ["reward_model.num_workers"])
    assert writes == {} and problems == []
    writes, problems = fold_plan({"reward": {"num_workers": 3}}, values.get)  # not from a command line: a conflict
    assert writes == {} and "set the same key" in problems[0]


def test_a_yaml_importlib_manager_names_its_class_with_name_and_turns_the_loop_on():
    values = {"reward_model.use_reward_loop": False}
    section = {"reward_manager": {"source": "importlib", "name": "Mine",
                                  "module": {"path": "/m.py", "name": "custom_reward_manager"}}}
    writes, problems = fold_plan({"reward": section}, values.get)
    assert problems == [] and writes == {
        "reward_model.reward_loop_source": "importlib", "reward_model.reward_loop_module_path": "/m.py",
        "reward_model.use_reward_loop": True, "reward_model.reward_loop_class_name": "Mine"}
    # a class given in our spelling too must be the same one
    values["reward_model.reward_loop_class_name"] = "Other"
    _, problems = fold_plan({"reward": section}, values.get)
    assert "reward.reward_manager.name='Mine'" in problems[0] and "name different classes" in problems[0]
    del values["reward_model.reward_loop_class_name"]
    # the loop switch given as false on the command line is refused with a v0.7 loop key
    writes, problems = fold_plan({"reward": section}, values.get, ["reward_model.use_reward_loop"])
    assert "cannot be given with reward_model.use_reward_loop=false" in problems[0]


def test_main_ppo_runs_a_user_yaml_with_a_reward_section_to_the_pre_ray_check(tmp_path):
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "mine.yaml").write_text(USER_YAML + V07_SECTION.replace("/r.py", str(tmp_path / "r.py")))
    (tmp_path / "r.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                   "    return 1.0\n")
    missing = tmp_path / "missing.parquet"
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={folder}",
                           "--config-name=mine", "reward.num_workers=2",  # the command line over the yaml's 3
                           f"data.train_files={missing}", "data.val_files=null", "data.train_batch_size=4",
                           "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2",
                           "actor_rollout_ref.actor.ppo_mini_batch_size=2", f"hydra.run.dir={tmp_path / 'h'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr[-2000:]
    problems = proc.stderr.split("Invalid config:", 1)[1].strip().splitlines()
    assert len(problems) == 1 and problems[0].startswith("data.train_files: data file not found"), proc.stderr


# ---------------------------------------------------------------- reward.max_concurrency_per_worker


@pytest.mark.parametrize(("workers", "per_worker"), [(2, 3), (3, 1)])
def test_max_concurrency_per_worker_times_num_workers_samples_are_scored_at_once(tmp_path, workers, per_worker):
    reward_file = tmp_path / "gate.py"
    reward_file.write_text(textwrap.dedent(GATE))
    cfg = typed(f"reward.num_workers={workers}", f"reward.max_concurrency_per_worker={per_worker}",
                f"reward.custom_reward_function.path={reward_file}", "reward_model.scoring.timeout=null")
    assert cfg.reward_model.use_reward_loop is True
    tokenizer = build_tiny_tokenizer()
    data, _ = make_batch(tokenizer, SAMPLES * 2)  # 8 rows
    manager = load_reward_manager(cfg, tokenizer, num_examine=0)
    expect = workers * per_worker
    _gate_state(manager)["expect"] = expect  # each call waits until `expect` are in flight together
    tensor, _ = compute_reward(data, manager)
    # exactly expect at once: fewer would leave the peak below it, more would push it above
    assert _gate_state(manager)["peak"] == expect
    assert tensor.sum(-1).tolist() == [1.0, 0.0, 1.0, 1.0] * 2


# ---------------------------------------------------------------- our own loop-only keys, as upstream's scripts set them


@pytest.mark.parametrize("line", [
    ["reward_model.num_workers=4"],
    ["reward_model.max_concurrency_per_worker=2"],
    ["reward_model.enable=true", "reward_model.model.path=/rm", "reward_model.rollout.name=vllm"],
])
def test_a_loop_only_key_without_the_switch_runs_the_loop_with_a_warning(line):
    import warnings

    from verl.trainer.config import ConfigWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        cfg = typed(*line)
    assert cfg.reward_model.use_reward_loop is True
    (note,) = [str(w.message) for w in caught if "is implied" in str(w.message)]
    assert note.startswith(line[-1]) and "reward_model.use_reward_loop=true" in note


def test_a_loop_only_key_with_the_loop_switched_off_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"reward_model.num_workers=4 is read by the reward loop only"):
        typed("reward_model.use_reward_loop=false", "reward_model.num_workers=4")
    # written, the key implies the loop even at the yaml's value; left unwritten it implies nothing
    assert typed("reward_model.num_workers=8").reward_model.use_reward_loop is True
    assert typed().reward_model.use_reward_loop is False


def test_module_name_is_noted_and_name_is_the_importlib_class():
    """reward.reward_manager.module.name names the imported module (upstream's ModuleConfig.name), which nothing
    reads: given on the command line or in a yaml it is noted, and the class is still reward.reward_manager.name."""
    import warnings

    from verl.trainer.config import ConfigWarning
    from verl.trainer.config.aliases import rewrite_aliases

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        out = rewrite_aliases(["reward.reward_manager.source=importlib", "reward.reward_manager.module.path=/m.py",
                               "reward.reward_manager.module.name=my_module", "reward.reward_manager.name=Mine"])
    assert any("module.name='my_module' names the module" in str(w.message) for w in caught)
    assert "reward_model.reward_loop_class_name=Mine" in out and not any("reward_manager=" in o for o in out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        writes, problems = fold_plan({"reward": {"reward_manager": {"source": "importlib", "name": "Mine",
                                                                    "module": {"path": "/m.py", "name": "m"}}}},
                                     {}.get)
    assert problems == [] and writes["reward_model.reward_loop_class_name"] == "Mine"
    assert any("module.name='m' names the module" in str(w.message) for w in caught)
    # with the registry source, name stays the registry name
    assert "reward_model.reward_manager=dapo" in rewrite_aliases(["reward.reward_manager.name=dapo"])
