"""The `data` section: which parquet files, how prompts are read, and how many per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.utils.config_schema import MutableConfig, at_least, choice, dict_field, list_field, refused

TRUNCATION_MODES = ("error", "left", "right", "middle")


@dataclass
class SamplerConfig(MutableConfig):
    """`data.sampler`: the training order from a user's sampler class (verl.data.rl_loading.create_rl_sampler).
    ``class_path``: ``pkg://module`` or a python file; ``class_name``: a subclass of
    verl.experimental.dataset.sampler.AbstractSampler. A curriculum sampler (AbstractCurriculumSampler) is shown
    every trained batch through ``update(batch)``."""

    class_path: str | None = None
    class_name: str | None = None


@dataclass
class CustomClsConfig(MutableConfig):
    """A user dataset class: `path` is a python file, `name` the class in it."""

    path: str | None = None
    name: str | None = None


@dataclass
class DatagenConfig(MutableConfig):
    """`data.datagen`: the data generator DynamicGenDataset (data.custom_cls) builds (verl.data.dynamic_gen):
    ``path`` a python file or ``pkg://module``, ``name`` an AbstractDataGenerator subclass in it."""

    path: str | None = None
    name: str | None = None


@dataclass
class DataConfig(MutableConfig):
    tokenizer: str | None = None
    use_shm: bool = refused(
        False, "copying the data files to /dev/shm is not built; they are read in place", "Set it to false."
    )
    train_files: list[str] = list_field(["~/data/arithmetic/train.parquet"])
    val_files: list[str] | None = list_field(["~/data/arithmetic/test.parquet"])
    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = at_least(512, 1)
    max_response_length: int = at_least(512, 1)
    train_batch_size: int = at_least(8, 1)
    # DAPO's dynamic sampling (algorithm.filter_groups): prompts generated per round; null means train_batch_size
    gen_batch_size: int | None = at_least(None, 1)
    # deprecated upstream too, and run as there: validation prompts per generation batch; None: the whole set
    val_batch_size: int | None = at_least(None, 1)
    return_raw_input_ids: bool = False
    return_raw_chat: bool = False
    return_full_prompt: bool = False
    shuffle: bool = True
    seed: int = 1
    dataloader_num_workers: int = at_least(0, 0)
    # validation in a data.seed-seeded random order, a new one each run (verl.data.rl_loading.create_val_sampler);
    # every prompt is still scored once, so the metrics over the whole set are those of the file order
    validation_shuffle: bool = False
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = at_least(1, 1)
    truncation: str = choice("error", TRUNCATION_MODES)
    trust_remote_code: bool = False
    train_max_samples: int = -1
    val_max_samples: int = -1
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    datagen: DatagenConfig = field(default_factory=DatagenConfig)
    # vision-language rows (docs/vlm.md): the column of {"bytes"|"path"} image entries, one per <image> placeholder
    image_key: str = "images"
    # the video column (<video> rows, Qwen2-VL / Qwen2.5-VL / Qwen3-VL; docs/vlm.md#videos)
    video_key: str = "videos"
    # upstream after v0.7: the audio column of an omni model's rows; audio is not built, so a split whose rows hold
    # audio there is refused by the data check (verl.data.data_check)
    audio_key: str = "audios"
    # upstream after v0.7: extra keyword arguments of every multi-modal processor call
    mm_processor_kwargs: dict[str, Any] = refused(
        dict_field(), "passing extra keyword arguments to each multi-modal processor call is not built: the image / "
        "video processor here is configured by the model folder's preprocessor_config.json and data.image_patch_size",
        "Leave it empty; set the processor's options in the model folder's preprocessor_config.json.")
    # upstream v0.7: images are resized to multiples of image_patch_size * 2 before the processor (verl.data.image_resize);
    # 14: Qwen2-VL / Qwen2.5-VL, 16: Qwen3-VL
    image_patch_size: int = at_least(14, 1)
    # items carry the processor's pixel_values / image_grid_thw (multi_modal_inputs) for the actor's forward
    return_multi_modal_inputs: bool = True
    # extra variables for the chat template wherever a prompt is rendered (dataset, data check, agent loop), e.g.
    # {enable_thinking: false} for Qwen3; free-form (the template decides what it reads)
    apply_chat_template_kwargs: dict[str, Any] = dict_field()
    # upstream v0.7: the tool config whose schemas the overlong-prompt filter renders into the chat template
    # (verl.data.tool_schemas); follows actor_rollout_ref.rollout.multi_turn.tool_config_path
    tool_config_path: str | None = None
    # upstream after v0.7: the function tools' schemas count too; follows multi_turn.function_tool_path
    function_tool_path: str | None = None

    @property
    def resolved_gen_batch_size(self) -> int:
        """Prompts per generation round (the dataloader's batch size): gen_batch_size, or train_batch_size."""
        return self.gen_batch_size if self.gen_batch_size is not None else self.train_batch_size
