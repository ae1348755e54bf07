"""The evaluation config (`python -m verl.trainer.main_eval`) as dataclasses; keys and defaults follow
evaluation.yaml (a test checks they agree)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.reward import CustomRewardFunctionConfig
from verl.utils.config_schema import MutableConfig, dict_field, refused


@dataclass
class EvalDataConfig(MutableConfig):
    path: str = "~/data/arithmetic/generations.parquet"
    prompt_key: str = refused("prompt", "main_eval scores each row's responses against its ground truth and never "
                              "reads the prompts", "Remove data.prompt_key.")
    response_key: str = "responses"
    data_source_key: str = "data_source"
    reward_model_key: str = "reward_model"
    output_path: str | None = None  # None: <data.path without .parquet>.eval.json


@dataclass
class EvaluationConfig(MutableConfig):
    data: EvalDataConfig = field(default_factory=EvalDataConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    ray_init: dict[str, Any] = refused(dict_field({"num_cpus": None, "timeline_json_file": None}),
                                       "main_eval scores in this process without Ray", "Remove the ray_init overrides.")
