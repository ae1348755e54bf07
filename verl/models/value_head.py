"""The critic's model: a causal-LM trunk with a one-output linear head per token.

We use ``transformers.AutoModelForTokenClassification`` with ``num_labels=1`` (as upstream verl does) so a critic
loads straight from the actor's HF folder: the trunk weights (``model.*``) match, only ``score`` is new. The new
head starts near zero so the first values are ~0 and the early value loss does not push large gradients into
the pretrained trunk. Dropout on the head is switched off: PPO compares values across forwards.
"""

from __future__ import annotations

import copy
import logging
import os
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForTokenClassification, PretrainedConfig, PreTrainedModel

__all__ = ["build_value_model", "load_value_model", "load_reward_model", "init_value_head_", "values_from_output",
           "DEFAULT_SCORE_INIT_STD"]

logger = logging.getLogger(__name__)

DEFAULT_SCORE_INIT_STD = 1e-3


def _value_config(config: PretrainedConfig) -> PretrainedConfig:
    config = copy.deepcopy(config)  # the caller's (actor's) config stays as it was
    config.num_labels = 1
    config.classifier_dropout = 0.0  # the token-classification head defaults to 0.1 dropout otherwise
    return config


def _token_classification_error(model_type: str, source: str, err: Exception) -> ValueError:
    return ValueError(f"cannot build a critic from {source}: model type {model_type!r} has no "
                      f"AutoModelForTokenClassification class in this transformers version ({err})")


def init_value_head_(model: PreTrainedModel, std: float = DEFAULT_SCORE_INIT_STD) -> None:
    """Re-initialise the ``score`` head: normal(0, std) weights, zero bias."""
    head = getattr(model, "score", None)
    if not isinstance(head, torch.nn.Linear):
        raise AttributeError(f"{type(model).__name__} has no linear `score` head; expected an "
                             f"AutoModelForTokenClassification model")
    with torch.no_grad():
        head.weight.normal_(mean=0.0, std=std)
        if head.bias is not None:
            head.bias.zero_()


def build_value_model(config: PretrainedConfig, score_init_std: float = DEFAULT_SCORE_INIT_STD,
                      **from_config_kwargs) -> PreTrainedModel:
    """A randomly initialised critic from a model config (tests, or training a critic from scratch)."""
    config = _value_config(config)
    if getattr(config, "vision_config", None) is not None:  # a VLM: its trunk under a score head
        from verl.models.vision_value_model import VisionLanguageValueModel

        model = VisionLanguageValueModel._from_config(config, **from_config_kwargs)
        init_value_head_(model, score_init_std)
        return model
    try:
        model = AutoModelForTokenClassification.from_config(config, **from_config_kwargs)
    except ValueError as err:
        raise _token_classification_error(config.model_type, "a config", err) from err
    init_value_head_(model, score_init_std)
    return model


def _load_token_classifier(model_path: str | os.PathLike, config: Any, trust_remote_code: bool,
                           **from_pretrained_kwargs) -> tuple[PreTrainedModel, set[str]]:
    """The folder as a token-classification model, and the parameter names it did not hold (a new head's)."""
    try:
        model, info = AutoModelForTokenClassification.from_pretrained(
            model_path, config=config, trust_remote_code=trust_remote_code, output_loading_info=True,
            **from_pretrained_kwargs)
    except ValueError as err:
        if "Unrecognized configuration class" not in str(err):
            raise
        raise _token_classification_error(config.model_type, str(model_path), err) from err
    return model, {str(k) for k in info.get("missing_keys", ())}


def load_value_model(model_path: str | os.PathLike, score_init_std: float = DEFAULT_SCORE_INIT_STD,
                     trust_remote_code: bool = False, hf_config: Any = None,
                     **from_pretrained_kwargs) -> PreTrainedModel:
    """Load a critic from an HF folder: the actor's (new small head) or a saved critic's (head kept).

    ``hf_config``: the folder's config with the user's overrides already applied (critic.model.override_config);
    read from the folder when not given. Extra keyword arguments (``dtype``, ...) go to ``from_pretrained``.
    """
    if hf_config is None:
        hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    config = _value_config(hf_config)
    if getattr(config, "vision_config", None) is not None:  # Qwen2-VL & co have no token-classification class
        from verl.models.vision_value_model import load_vision_value_model

        model, has_head = load_vision_value_model(str(model_path), config, trust_remote_code=trust_remote_code,
                                                  **from_pretrained_kwargs)
        missing = set() if has_head else {"score.weight"}
    else:
        model, missing = _load_token_classifier(model_path, config, trust_remote_code, **from_pretrained_kwargs)
    if any(k.startswith("score.") for k in missing):
        logger.info("critic from %s: new value head (score) initialised with std %s", model_path, score_init_std)
        init_value_head_(model, score_init_std)
    return model


def load_reward_model(model_path: str | os.PathLike, key: str, trust_remote_code: bool = False,
                      **from_pretrained_kwargs) -> PreTrainedModel:
    """A trained reward model as a one-label token-classification model (as upstream verl loads it).

    A sequence-classification checkpoint of the same architecture loads too: both keep the trunk under the same
    names and the head in ``score`` (the sequence classifier's has no bias, so a missing ``score.bias`` is zero).
    Unlike a critic, a missing ``score.weight`` is an error: a fresh head would score every response at random.
    """
    hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    labels = getattr(hf_config, "num_labels", 1)
    if labels != 1:
        raise ValueError(f"{key}={str(model_path)!r} has num_labels={labels}; a reward model outputs one score "
                         "(train it with num_labels=1)")
    config = _value_config(hf_config)
    if getattr(config, "vision_config", None) is not None:  # a VLM reward model: its trunk under the score head
        from verl.models.vision_value_model import load_vision_value_model

        model, has_head = load_vision_value_model(str(model_path), config, trust_remote_code=trust_remote_code,
                                                  **from_pretrained_kwargs)
        missing = set() if has_head else {"score.weight"}
    else:
        model, missing = _load_token_classifier(model_path, config, trust_remote_code, **from_pretrained_kwargs)
    if "score.weight" in missing:
        raise ValueError(f"{key}={str(model_path)!r} has no trained score head (score.weight is missing): it is not a "
                         "reward model. Point the key at a token- or sequence-classification checkpoint.")
    if "score.bias" in missing and model.score.bias is not None:
        with torch.no_grad():
            model.score.bias.zero_()
    return model


def values_from_output(output) -> torch.Tensor:
    """(bs, L) float values from a token-classification output (logits (bs, L, 1)) or a plain tensor."""
    values = output.logits if hasattr(output, "logits") else output
    if isinstance(values, (tuple, list)):
        values = values[0]
    if values.dim() == 3:
        if values.size(-1) != 1:
            raise ValueError(f"critic output has {values.size(-1)} values per token; build it with num_labels=1")
        values = values.squeeze(-1)
    return values.float()
