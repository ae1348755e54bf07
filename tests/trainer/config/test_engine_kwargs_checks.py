"""actor_rollout_ref.rollout.engine_kwargs: a section for another engine is refused, vLLM's names are checked
before Ray, and upstream's disable_mm_preprocessor_cache reaches vLLM under its current name."""

from omegaconf import OmegaConf

from verl.trainer.config import PPOTrainerConfig
from verl.trainer.config.checks import run_checks
from verl.trainer.config.validate import load_config
from verl.utils.config_schema import build_config

E = "actor_rollout_ref.rollout.engine_kwargs"


def _problems(*overrides: str) -> str:
    tree = OmegaConf.to_container(load_config(["trainer.n_gpus_per_node=1", *overrides]), resolve=True)
    return "\n".join(run_checks(build_config(PPOTrainerConfig, tree).config))


def test_a_section_for_another_engine_is_refused():
    assert f"{E}.vllm is read by the vllm engine only" in _problems(
        "actor_rollout_ref.rollout.name=hf", f"+{E}.vllm.swap_space=4")
    assert f"{E}.sglang is read by the sglang engine only" in _problems(
        "actor_rollout_ref.rollout.name=vllm", f"+{E}.sglang.attention_backend=fa3")
    assert f"{E}." not in _problems("actor_rollout_ref.rollout.name=hf")


def test_vllm_names_are_checked_before_ray():
    assert f"{E}.vllm.no_such_flag" in _problems("actor_rollout_ref.rollout.name=vllm", f"+{E}.vllm.no_such_flag=1")
    assert f"{E}." not in _problems("actor_rollout_ref.rollout.name=vllm", f"+{E}.vllm.max_logprobs=8",
                                    f"+{E}.vllm.disable_mm_preprocessor_cache=true")


def test_upstreams_disable_mm_preprocessor_cache_becomes_mm_processor_cache_gb():
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.vllm.engine import vllm_engine_kwargs

    assert vllm_engine_kwargs(RolloutConfig(engine_kwargs={"vllm": {"disable_mm_preprocessor_cache": True}})) == {
        "mm_processor_cache_gb": 0}
    assert vllm_engine_kwargs(RolloutConfig(engine_kwargs={"vllm": {"disable_mm_preprocessor_cache": False}})) == {}


def test_null_engine_kwargs_mean_the_engines_default_as_upstream():
    """Older upstream yamls declared `swap_space: null` and `sglang.attention_backend: null`: a null is dropped
    before vllm.LLM, so neither the unknown vLLM name nor the other engine's all-null section is refused."""
    from verl.workers.config import RolloutConfig
    from verl.workers.rollout.vllm.engine import vllm_engine_kwargs

    assert f"{E}." not in _problems("actor_rollout_ref.rollout.name=vllm", f"+{E}.vllm.swap_space=null",
                                    f"+{E}.sglang.attention_backend=null")
    assert f"{E}.vllm.swap_space" in _problems("actor_rollout_ref.rollout.name=vllm", f"+{E}.vllm.swap_space=4")
    kwargs = {"swap_space": None, "max_logprobs": 8}
    assert vllm_engine_kwargs(RolloutConfig(engine_kwargs={"vllm": kwargs})) == {"max_logprobs": 8}


def test_engine_kwargs_written_without_plus_are_appended():
    """Upstream's VLM scripts write `engine_kwargs.vllm.disable_mm_preprocessor_cache=True` without `+` (older
    yamls declared it); the command line is rewritten to append it and the value reaches the engine."""
    from verl.trainer.config.aliases import rewrite_aliases
    from verl.trainer.config.overrides import unknown_override_problems

    line = [f"{E}.vllm.disable_mm_preprocessor_cache=True", "+actor_rollout_ref.rollout.engine_kwargs.vllm.seed=3"]
    rewritten = rewrite_aliases(line)
    assert rewritten == [f"+{E}.vllm.disable_mm_preprocessor_cache=True", f"+{E}.vllm.seed=3"]
    assert unknown_override_problems(rewritten) == []
    cfg = load_config(["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=vllm", *line])
    assert OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.vllm) == {
        "disable_mm_preprocessor_cache": True, "seed": 3}
