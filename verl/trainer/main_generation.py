"""Batch generation: a parquet of prompts -> the same rows plus `responses` (data.n_samples strings per prompt).

    python -m verl.trainer.main_generation data.path=~/data/arithmetic/test.parquet \
        data.output_path=~/data/arithmetic/gen.parquet data.n_samples=4 model.path=<HF folder>

Prompts are chat-templated with the model's tokenizer and generated in rounds of `data.batch_size` prompts,
each repeated n_samples times, by ActorRolloutRefWorker in its rollout role (the `rollout.name` backend: hf, or
vllm when installed). One worker runs in this process; `trainer.nnodes x trainer.n_gpus_per_node > 1` starts
Ray workers and every round is split across them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.generation import GenerationConfig, generation_problems
from verl.trainer.sft.argv import exit_on_config_error, precheck_argv
from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import build_config

if TYPE_CHECKING:
    from verl.trainer.generation_runner import encode_prompts, run_generation, worker_class

__all__ = ["validate_generation_config", "run_generation", "encode_prompts", "worker_class", "main"]


def __getattr__(name: str):
    # The runner (torch, the workers) loads only after the config has passed, so a bad key exits in a second.
    from verl.trainer import generation_runner

    try:
        return getattr(generation_runner, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def validate_generation_config(config: DictConfig | dict) -> GenerationConfig:
    """The typed config, or ConfigError listing every problem (each naming its key), before any model loads."""
    node = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    result = build_config(GenerationConfig, node)
    if result.problems:
        raise ConfigError(result.problems)
    problems = generation_problems(result.config)
    if problems:
        raise ConfigError(problems)
    return result.config


@hydra.main(config_path="config", config_name="generation", version_base=None)
def main(config: DictConfig) -> None:
    try:
        typed = validate_generation_config(config)
    except ConfigError as err:
        exit_on_config_error(err)
    from verl.trainer.generation_runner import run_generation

    run_generation(typed)


if __name__ == "__main__":
    precheck_argv(GenerationConfig, "generation")
    main()
