"""The reward-model worker (``reward_model.enable=true``): an FSDP2-sharded HF model that scores each response.

The model is a token-classification model with one label (``verl.models.value_head.load_reward_model``; a
sequence-classification checkpoint of the same architecture loads into it), as upstream verl loads it. Its output
at a row's last real token is the row's score, written as ``rm_scores`` (bs, response_length) on the last real
response token, zeros elsewhere: the same place the rule reward puts its score, so the reward managers hand
``rm_scores`` through in its stead (verl.workers.reward_manager.abstract.precomputed_scores).

By default the worker is colocated with the actor (one process per rank holds both, as the critic and the
reference policy are); ``reward_model.enable_resource_pool`` gives it its own ranks. Inputs are the rollout's ids,
or re-templated in the reward model's chat format when its tokenizer differs from the policy's
(verl.workers.reward_model_inputs). Micro-batches are ``micro_batch_size_per_gpu`` rows, or token budgets of
``forward_max_token_len_per_gpu`` with ``use_dynamic_bsz`` (verl.workers.micro_batching).
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, register
from verl.utils.profiler import DistProfiler
from verl.workers.fsdp_utils import apply_fsdp2
from verl.workers.fsdp_workers import _FSDPWorkerBase
from verl.workers.micro_batching import forwards_context, make_micro_batches, module_device, restore_order
from verl.workers.profiling import role_profiler
from verl.workers.reward_model_inputs import (
    last_token_index,
    response_score_index,
    retemplate,
    reward_texts,
    same_tokenizer,
)
from verl.workers.vision_rows import MM_ROW, hf_position_ids, vision_kwargs

__all__ = ["RewardModelWorker", "rm_micro_batch_size"]

_KEY = "reward_model"


def rm_micro_batch_size(cfg: Any, dp_size: int) -> int | None:
    """Rows per forward on one rank: the deprecated global micro_batch_size (divided by the ranks) wins when set,
    as upstream's worker does; else micro_batch_size_per_gpu."""
    if cfg.micro_batch_size:
        return max(1, cfg.micro_batch_size // dp_size)
    return cfg.micro_batch_size_per_gpu


class RewardModelWorker(_FSDPWorkerBase):
    """Scores responses with a trained reward model; no optimizer, no checkpoint (the model is frozen)."""

    def __init__(self, config: Any) -> None:
        """`config`: the typed RewardModelConfig (the ``reward_model`` section)."""
        super().__init__()
        self.config = config
        self.profiler = role_profiler(self.rank, config.profiler, "reward_model")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        from verl.models.loader import load_tokenizer, resolve_model_path
        from verl.models.value_head import load_reward_model

        self._init_distributed(self.config.model.fsdp_config.fsdp_size)
        self._seed(self.config.model.fsdp_config)
        model_cfg = self.config.model
        if model_cfg.external_lib:  # registers custom model classes in this process, where the model loads
            importlib.import_module(model_cfg.external_lib)
        path = resolve_model_path(model_cfg.path, f"{_KEY}.model.path")
        trust = model_cfg.trust_remote_code
        module = load_reward_model(path, f"{_KEY}.model.path", trust_remote_code=trust,
                                   dtype=self._model_dtype(model_cfg.fsdp_config, f"{_KEY}.model"))
        module.config.use_cache = False
        module.requires_grad_(False)
        module.eval()
        self.tokenizer = load_tokenizer(path, f"{_KEY}.model.path", trust_remote_code=trust)
        self.input_tokenizer = None
        if model_cfg.input_tokenizer:
            input_tokenizer = load_tokenizer(resolve_model_path(model_cfg.input_tokenizer, f"{_KEY}.model.input_tokenizer"),
                                             f"{_KEY}.model.input_tokenizer", trust_remote_code=trust)
            if not same_tokenizer(input_tokenizer, self.tokenizer):
                self.input_tokenizer = input_tokenizer  # re-template every batch
        self._vocab_size = module.get_input_embeddings().num_embeddings
        if model_cfg.use_remove_padding:
            from verl.models.varlen_attention import enable_varlen_attention

            enable_varlen_attention(module)
        self.rm_module = apply_fsdp2(module, model_cfg.fsdp_config, self.device_mesh)

    @property
    def switches_template(self) -> bool:
        """Whether inputs are re-templated (the input tokenizer differs from the reward model's)."""
        return self.input_tokenizer is not None

    def _extract_inputs_for_reward(self, data: DataProto) -> tuple[list[str], list[str], list[Any]]:
        """Upstream's (questions, answers, ground_truths) of ``data`` for ``reward_preprocess``
        (verl.workers.reward_model_inputs.reward_texts). Responses are decoded with ``self.tokenizer``, as upstream
        does: when ``reward_model.model.input_tokenizer`` differs from the reward model's, the policy's ids need
        ``reward_texts(data, self.input_tokenizer)`` instead."""
        return reward_texts(data, self.tokenizer)

    # -- scoring --------------------------------------------------------------------------------------------------

    def _model_inputs(self, data: DataProto) -> TensorDict:
        self._multi_modal_inputs = data.non_tensor_batch.get("multi_modal_inputs")
        if self._multi_modal_inputs is not None and self.switches_template:
            raise ValueError(f"the batch holds images, but {_KEY}.model.input_tokenizer differs from the reward "
                             "model's tokenizer: re-templating the chat as text would drop them. Use a reward model "
                             "with the policy's tokenizer and processor (the same Qwen-VL family)")
        if self.switches_template:
            tensors = retemplate(data, self.input_tokenizer, self.tokenizer, self.config.max_length)
        else:
            tensors = {k: data.batch[k] for k in ("input_ids", "attention_mask", "position_ids")}
            top = int(tensors["input_ids"].max()) if tensors["input_ids"].numel() else 0
            if top >= self._vocab_size:
                raise ValueError(f"token id {top} is outside the reward model's vocabulary ({self._vocab_size}): "
                                 f"its tokenizer is not the policy's. Set {_KEY}.model.input_tokenizer to the policy's "
                                 "tokenizer so prompts and responses are re-templated for the reward model")
        if self._multi_modal_inputs is not None:  # each micro-batch finds its rows' images by row number
            tensors[MM_ROW] = torch.arange(len(data))
        return TensorDict(tensors, batch_size=[len(data)])

    def _forward(self, micro_batch: TensorDict) -> torch.Tensor:
        """(bs,) the model's output at each row's last real token."""
        from verl.models.value_head import values_from_output

        attention_mask = micro_batch["attention_mask"]
        last = last_token_index(attention_mask)
        images = vision_kwargs(micro_batch, getattr(self, "_multi_modal_inputs", None))  # a VLM reward model
        if self.config.model.use_remove_padding:
            from verl.models.packing import length_bucket, pack_sequences
            from verl.models.varlen_attention import packed_forward

            # reward_model.model.fsdp_config.pad_to_length: the packed row padded up to a multiple of the bucket
            packed = pack_sequences(micro_batch["input_ids"], attention_mask, micro_batch["position_ids"],
                                    length_bucket(self.config.model.fsdp_config))
            with packed_forward():
                output = self.rm_module(use_cache=False, **packed.model_inputs(), **images)
            positions = packed.token_index[torch.arange(len(last), device=last.device), last]
            return values_from_output(output)[0, positions]
        output = self.rm_module(input_ids=micro_batch["input_ids"], attention_mask=attention_mask,
                                position_ids=hf_position_ids(micro_batch["position_ids"]), use_cache=False, **images)
        return values_from_output(output)[torch.arange(len(last), device=last.device), last]

    def score(self, data: DataProto) -> torch.Tensor:
        """(bs,) one score per row, micro-batched by rows or by token budget."""
        cfg = self.config
        inputs = self._model_inputs(data)
        micro_batches, indices = make_micro_batches(
            inputs, rm_micro_batch_size(cfg, self.world_size), cfg.use_dynamic_bsz, cfg.forward_max_token_len_per_gpu,
            f"{_KEY}.micro_batch_size_per_gpu / {_KEY}.forward_max_token_len_per_gpu")
        device = module_device(self.rm_module)
        outputs = []
        with torch.no_grad(), forwards_context(self.rm_module, len(micro_batches)):
            for micro_batch in micro_batches:
                outputs.append(self._forward(micro_batch.to(device)).float().cpu())
        return restore_order(outputs, indices)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @DistProfiler.annotate()
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` (bs, response_length): the score on each row's last real response token."""
        start = time.perf_counter()
        scores = self.score(data)
        where = response_score_index(data)
        rm_scores = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        rows = torch.nonzero(where >= 0, as_tuple=True)[0]
        rm_scores[rows, where[rows]] = scores[rows]
        return DataProto.from_dict(tensors={"rm_scores": rm_scores},
                                   meta_info={"timing": {"compute_rm_score": time.perf_counter() - start}})
