"""Merging an FSDP checkpoint (torch.distributed.checkpoint shards, any world size) into a HF folder.

DCP records every tensor's global shape and which byte range of which shard file holds each piece, so one process
can read the full tensors without knowing how many ranks wrote them. The model is built on the meta device from
the saved config, materialised empty, filled from the shards, and saved with `save_pretrained`.

A LoRA role (its folder has `lora_adapter/`) saved the peft module: its shards hold the frozen base weights and
the adapter under peft's names. They are read as they are and merged (W + scaling * B @ A, the scaling from
`lora_adapter/adapter_config.json`) into the plain model, so the merged folder loads without peft.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings

import torch
import torch.distributed.checkpoint as dcp

from verl.checkpoint.fsdp_checkpoint_manager import ADAPTER_DIR, MODEL_DIR
from verl.checkpoint.hf_export import HF_SUBDIR
from verl.checkpoint.manifest import check_file, raise_if_problems, read_manifest, warn_if_foreign
from verl.model_merger.base_model_merger import BaseModelMerger
from verl.models.lora import merge_lora_weights, read_adapter_config, scaling_from_adapter_config

logger = logging.getLogger(__name__)

# written by save_pretrained from the merged model itself; everything else in huggingface/ (tokenizer, chat
# template) is copied as is
_REGENERATED = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")


def _model_class(config, trust_remote_code: bool) -> type:
    import transformers

    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    if trust_remote_code:
        return transformers.AutoModelForCausalLM
    raise ValueError(f"config.architectures={getattr(config, 'architectures', None)!r} names no transformers class; "
                     "pass --trust-remote-code for custom models, or --hf_model_path with a matching config")


def _checkpoint_dtype(model_dir: str) -> torch.dtype:
    metadata = dcp.FileSystemReader(model_dir).read_metadata()
    for entry in metadata.state_dict_metadata.values():
        dtype = getattr(getattr(entry, "properties", None), "dtype", None)
        if dtype is not None and dtype.is_floating_point:
            return dtype
    return torch.float32


class FSDPModelMerger(BaseModelMerger):
    @property
    def role_dir(self) -> str:
        return os.path.abspath(os.path.expanduser(self.config.local_dir))

    @property
    def hf_dir(self) -> str:
        return os.path.abspath(os.path.expanduser(self.config.hf_model_config_path or os.path.join(self.role_dir, HF_SUBDIR)))

    def merge_and_save(self) -> str | None:
        model = self.load_merged_model()
        if self.config.operation == "test":
            self._compare(model)
            return None
        target = os.path.abspath(os.path.expanduser(self.config.target_dir or "tmp"))
        os.makedirs(target, exist_ok=True)
        model.save_pretrained(target)
        self._copy_processing_files(target)
        print(f"merged {self.role_dir} -> {target}")
        return target

    def load_merged_model(self) -> torch.nn.Module:
        """The full model with the checkpoint's weights, on CPU, after checking every shard against the manifest."""
        from transformers import AutoConfig

        self._verify_shards()
        config = AutoConfig.from_pretrained(self.hf_dir, trust_remote_code=self.config.trust_remote_code)
        model_dir = os.path.join(self.role_dir, MODEL_DIR)
        with torch.device("meta"):
            model = _model_class(config, self.config.trust_remote_code)._from_config(
                config, dtype=_checkpoint_dtype(model_dir))
        model = model.to_empty(device="cpu")
        model.tie_weights()  # to_empty gives tied parameters separate storage; tie them back before filling
        if os.path.isdir(os.path.join(self.role_dir, ADAPTER_DIR)):
            self._load_lora_merged(model, model_dir)
            return model.eval()
        state = model.state_dict()
        self._dcp_read({"model": state}, model_dir, model)
        model.load_state_dict(state)
        return model.eval()

    def _dcp_read(self, state: dict, model_dir: str, model: torch.nn.Module) -> None:
        try:
            with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
                warnings.simplefilter("ignore", UserWarning)
                dcp.load(state, checkpoint_id=model_dir, no_dist=True)
        except Exception as err:  # noqa: BLE001 - re-raised naming the folder and the config used
            raise RuntimeError(f"could not read the shards in {model_dir} into {type(model).__name__} built from "
                               f"{self.hf_dir}/config.json: {err}") from err

    def _load_lora_merged(self, model: torch.nn.Module, model_dir: str) -> None:
        """Fill ``model`` from a peft module's shards, merging the adapter into the base weights."""
        metadata = dcp.FileSystemReader(model_dir).read_metadata()
        peft_state = {key[len("model."):]: torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
                      for key, meta in metadata.state_dict_metadata.items()
                      if key.startswith("model.") and hasattr(meta, "size")}
        self._dcp_read({"model": peft_state}, model_dir, model)
        scaling = scaling_from_adapter_config(read_adapter_config(os.path.join(self.role_dir, ADAPTER_DIR)))
        merged = merge_lora_weights(peft_state, scaling)
        result = model.load_state_dict(merged, strict=False)
        tied = set(getattr(model, "_tied_weights_keys", None) or [])
        missing = [k for k in result.missing_keys if k not in tied]
        if missing or result.unexpected_keys:
            raise ValueError(f"the LoRA shards in {model_dir} do not fit {type(model).__name__}: missing "
                             f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}")
        model.tie_weights()

    def _verify_shards(self) -> None:
        if not os.path.isdir(self.role_dir):
            raise FileNotFoundError(f"--local_dir {self.role_dir} does not exist; pass a role folder such as "
                                    "<ckpt>/global_step_N/actor")
        manifest = read_manifest(self.role_dir)
        warn_if_foreign(self.role_dir)  # the DCP metadata it reads next is a pickle
        if "model" not in manifest["contents"]:
            raise ValueError(f"{self.role_dir} was saved without the model (checkpoint.save_contents="
                             f"{manifest['contents']}); nothing to merge")
        problems = [check_file(self.role_dir, rel, info) for rel, info in manifest["files"].items()
                    if rel.startswith(MODEL_DIR + "/")]
        raise_if_problems([p for p in problems if p])
        if not os.path.isfile(os.path.join(self.hf_dir, "config.json")):
            raise FileNotFoundError(f"{self.hf_dir}/config.json is missing; pass --hf_model_path with the model's HF "
                                    "folder")

    def _copy_processing_files(self, target: str) -> None:
        if not os.path.isdir(self.hf_dir):
            return
        for name in os.listdir(self.hf_dir):
            src = os.path.join(self.hf_dir, name)
            if os.path.isfile(src) and name not in _REGENERATED and not name.endswith((".safetensors", ".bin")):
                shutil.copy2(src, os.path.join(target, name))

    def _compare(self, model: torch.nn.Module) -> None:
        reference = type(model).from_pretrained(self.config.test_hf_dir, dtype=next(model.parameters()).dtype)
        ours, theirs = model.state_dict(), reference.state_dict()
        missing = sorted(set(theirs) - set(ours))
        if missing:
            raise AssertionError(f"the checkpoint lacks {missing[:5]} found in {self.config.test_hf_dir}")
        worst = max(((name, (ours[name] - theirs[name]).abs().max().item()) for name in theirs), key=lambda x: x[1])
        if not all(torch.allclose(ours[n], theirs[n], atol=1e-6, rtol=1e-6) for n in theirs):
            raise AssertionError(f"{self.role_dir} differs from {self.config.test_hf_dir}: max |diff| "
                                 f"{worst[1]:.3g} in {worst[0]}")
        print(f"{self.role_dir} matches {self.config.test_hf_dir} (max |diff| {worst[1]:.3g} in {worst[0]})")
