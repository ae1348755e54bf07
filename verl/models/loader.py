"""Loading tokenizers and HF models from a local folder or a hub id, with errors that say what to do offline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from verl.models.vision import is_vision_language_config
from verl.utils.model import update_model_config


def resolve_model_path(path: str | None, key: str) -> str:
    """A local folder as given; None/'' means the bundled default model; '~' is expanded; hub ids pass through."""
    if path in (None, "", "default"):
        from verl.utils.default_model import default_model_path

        return default_model_path()
    expanded = os.path.expanduser(str(path))
    if expanded.startswith(("/", ".", "~")) and not Path(expanded).exists():
        raise FileNotFoundError(f"{key}={path!r}: no such folder. Point it at a HF model folder (config.json + weights).")
    return expanded


SHM_ROOT = "/dev/shm/verl-cache"


def copy_to_shm(path: str, key: str, root: str | None = None) -> str:
    """`model.use_shm`: a copy of the model folder in shared memory (tmpfs), made once and reused while the source
    is unchanged, so every worker on this node reads the weights from RAM. Returns the copy's folder."""
    import hashlib
    import shutil

    root = root or SHM_ROOT
    source = Path(path)
    if not source.is_dir():
        raise FileNotFoundError(f"{key}.use_shm=true needs a local model folder, but {key}.path={path!r} is not one.")
    if not Path(root).parent.is_dir():
        raise FileNotFoundError(f"{key}.use_shm=true: {Path(root).parent} does not exist on this machine; set it "
                                "to false.")
    stamp = max((f.stat().st_mtime_ns for f in source.rglob("*") if f.is_file()), default=0)
    digest = hashlib.md5(f"{source.resolve()}:{stamp}".encode()).hexdigest()[:16]
    target = Path(root) / f"{source.name}-{digest}"
    if not target.is_dir():
        partial = target.with_name(target.name + f".part{os.getpid()}")
        shutil.copytree(source, partial, dirs_exist_ok=True)
        partial.rename(target)  # whole or absent: a concurrent reader never sees half a copy
    return str(target)


def _explain(err: Exception, path: str, key: str, what: str) -> RuntimeError:
    hint = ("it is not a local folder, so it was looked up on the Hugging Face hub, which this machine cannot reach; "
            "download it elsewhere and point the key at the folder") if not Path(path).exists() else "see the cause above"
    return RuntimeError(f"could not load the {what} from {key}={path!r}: {type(err).__name__}: {err}. {hint}.")


def load_tokenizer(path: str, key: str, trust_remote_code: bool = False, custom_chat_template: str | None = None):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001 - re-raised with the key and an offline hint
        raise _explain(err, path, key, "tokenizer") from err
    if custom_chat_template:
        tokenizer.chat_template = custom_chat_template
    if tokenizer.pad_token_id is None:
        # Generation pads responses; models without a pad token use EOS, as upstream does.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_config_path(model: Any, key: str, path: str | None = None) -> tuple[str, str]:
    """Where ``model``'s HF config (config.json) is read, and the key that named it: ``<key>.hf_config_path`` when
    set (upstream's HFModelConfig; the weights still come from ``path``), else the model folder ``path``."""
    hf_config_path = getattr(model, "hf_config_path", None)
    if hf_config_path:
        return resolve_model_path(hf_config_path, f"{key}.hf_config_path"), f"{key}.hf_config_path"
    return path or resolve_model_path(model.path, f"{key}.path"), f"{key}.path"


def model_tokenizer_path(model: Any, key: str) -> tuple[str, str]:
    """The folder of ``model``'s tokenizer (and a VLM's processor), and the key that named it:
    ``<key>.tokenizer_path`` when set (upstream's HFModelConfig), else the model folder."""
    tokenizer_path = getattr(model, "tokenizer_path", None)
    if tokenizer_path:
        return resolve_model_path(tokenizer_path, f"{key}.tokenizer_path"), f"{key}.tokenizer_path"
    return resolve_model_path(model.path, f"{key}.path"), f"{key}.path"


def load_causal_lm(model: Any, key: str, dtype: torch.dtype = torch.float32, value_head: bool = False):
    """AutoModelForCausalLM (or the critic's token-classification value model) from ``model.path``, where ``model`` is
    a HFModelConfig or a FSDPCriticModelCfg (path, trust_remote_code, override_config, enable_gradient_checkpointing,
    gradient_checkpointing_policy)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_path(model.path, f"{key}.path")
    trust = model.trust_remote_code
    config_path, config_key = model_config_path(model, key, path)
    try:
        hf_config = AutoConfig.from_pretrained(config_path, trust_remote_code=trust)
    except Exception as err:  # noqa: BLE001
        raise _explain(err, config_path, config_key, "model config") from err
    overrides = dict(model.override_config)
    # the attention kernel is a from_pretrained argument: set on the config it would be ignored (sdpa loaded)
    attn_implementation = overrides.pop("attn_implementation", None)
    update_model_config(hf_config, overrides)  # free-form HF config attributes; a dict updates a sub-config
    kwargs = dict(dtype=dtype, trust_remote_code=trust)
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        if value_head:
            from verl.models.value_head import load_value_model

            module = load_value_model(path, hf_config=hf_config, **kwargs)
        elif is_vision_language_config(hf_config):  # Qwen2-VL / Qwen2.5-VL: the LM head over a vision tower
            from transformers import AutoModelForImageTextToText

            module = AutoModelForImageTextToText.from_pretrained(path, config=hf_config, **kwargs)
        else:
            module = AutoModelForCausalLM.from_pretrained(path, config=hf_config, **kwargs)
    except Exception as err:  # noqa: BLE001
        raise _explain(err, path, f"{key}.path", "model weights") from err
    from verl.models.fused_norm_rope import fuse_norm_and_rope

    fuse_norm_and_rope(module)  # same forward, fewer passes in the backward; VERL_FUSED_NORM_ROPE=0 turns it off
    tiled = getattr(model, "tiled_mlp", None)
    if tiled is not None and tiled.enabled:  # model.tiled_mlp: the MLPs over token slices (verl.models.tiled_mlp)
        from verl.models.tiled_mlp import apply_tiled_mlp

        apply_tiled_mlp(module, tiled.num_shards, f"{key}.tiled_mlp")
    if model.enable_gradient_checkpointing:
        from verl.models.checkpoint_policy import apply_gradient_checkpointing

        apply_gradient_checkpointing(module, model.gradient_checkpointing_policy)
    module.config.use_cache = False
    return module, path
