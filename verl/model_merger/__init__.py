"""Turning sharded training checkpoints into Hugging Face model folders (`python -m verl.model_merger merge ...`)."""

from verl.model_merger.base_model_merger import BaseModelMerger, ModelMergerConfig, generate_config_from_args

__all__ = ["BaseModelMerger", "ModelMergerConfig", "generate_config_from_args"]
