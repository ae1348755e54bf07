"""The critic's model for a vision-language checkpoint: the VLM's trunk (vision tower + language model) with a
one-output linear ``score`` head per token.

transformers has no AutoModelForTokenClassification class for Qwen2-VL / Qwen2.5-VL / Qwen3-VL, which is how a text
critic is built (verl.models.value_head). This class keeps the same layout a token classifier has: the trunk under
``model.*`` (the names the actor's ``*ForConditionalGeneration`` folder stores it under, so a critic loads straight
from the actor's folder and only ``score`` is new; its ``lm_head`` is left out) and the head in ``score``, so
``values_from_output``, ``init_value_head_`` and the checkpoint / HF export code treat both critics alike.
"""

from __future__ import annotations

import torch
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput

__all__ = ["VisionLanguageValueModel"]


class VisionLanguageValueModel(PreTrainedModel):
    """``model``: the VLM's base model (AutoModel: Qwen2VLModel, Qwen2_5_VLModel, ...); ``score``: hidden -> 1."""

    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        self.model = AutoModel.from_config(config)
        # one config object for head and trunk: settings made on the value model's config after loading (the
        # attention implementation verl.models.varlen_attention switches to) must reach the trunk's layers
        self.config = self.model.config
        # FSDP wraps these blocks one unit each (decoder layers and vision blocks), as it does the actor's
        self._no_split_modules = list(getattr(self.model, "_no_split_modules", None) or [])
        self.score = torch.nn.Linear(config.get_text_config().hidden_size, 1)
        self.post_init()

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, pixel_values=None,
                image_grid_thw=None, **kwargs) -> TokenClassifierOutput:
        kwargs.pop("labels", None)  # a value model has no labels; the critic computes its own loss
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         pixel_values=pixel_values, image_grid_thw=image_grid_thw, **kwargs)
        # a (bs, L, 1) copy, not the linear's view of its 2-D output: FSDP2 warns on a root module returning a view
        # (an in-place op on it would skip its pre-backward hook)
        return TokenClassifierOutput(logits=self.score(out.last_hidden_state).clone())


def _saved_score(path: str) -> dict[str, torch.Tensor]:
    """``score.*`` tensors of a saved critic folder's safetensors (empty for an actor's folder)."""
    import glob
    import os

    from safetensors import safe_open

    found = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open handles are not iterable
                if name.startswith("score."):
                    found[name[len("score."):]] = handle.get_tensor(name)
    return found


def load_vision_value_model(path: str, config: PretrainedConfig, **from_pretrained_kwargs) -> tuple[
        VisionLanguageValueModel, bool]:
    """The critic for a VLM folder, and whether its ``score`` head was found there (a saved critic) or is new.

    The trunk loads through the folder's ``*ForConditionalGeneration`` class, which knows the family's checkpoint
    layouts (a hub Qwen2.5-VL stores ``model.layers`` / ``visual``; transformers >= 5 names them
    ``model.language_model`` / ``model.visual``), and is moved under the value model without a copy."""
    from transformers import AutoModelForImageTextToText

    vlm = AutoModelForImageTextToText.from_pretrained(path, config=config, **from_pretrained_kwargs)
    with torch.device("meta"):  # the shell only: its trunk and head are replaced below
        value = VisionLanguageValueModel(config)
    value.model = vlm.model
    value.config = vlm.model.config  # shared with the trunk, as in __init__
    reference = next(vlm.model.parameters())
    value.score = torch.nn.Linear(config.get_text_config().hidden_size, 1, device=reference.device,
                                  dtype=reference.dtype)
    saved = _saved_score(path)
    if saved:
        value.score.load_state_dict(saved)
    return value, bool(saved)
