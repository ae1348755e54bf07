"""The data-parallel PPO critic: values of response states and the clipped value update, on one rank.

The module outputs one value per token (``verl.models.value_head``: token classification with num_labels=1).
The value of response token t is read at position P-1+t — the state *before* the token is generated, the same
positions whose logits predict the response in the actor.

Batch sizes follow the actor: ``ppo_mini_batch_size`` is already per-rank responses (the worker multiplies by
``rollout.n`` and divides by the data-parallel size), ``ppo_micro_batch_size_per_gpu`` / dynamic token budgets
for the update, ``forward_micro_batch_size_per_gpu`` for ``compute_values`` (meta_info overrides it).
Micro-batch losses are weighted by their share of the mini-batch (tokens for token-mean), as in the actor.
``critic.model.use_remove_padding`` packs each micro-batch's real tokens into one row, as the actor does.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict

from verl import algos as core_algos
from verl.models.packing import length_bucket, pack_sequences, scatter_to_padded, shard_for_sequence_parallel
from verl.models.value_head import values_from_output
from verl.models.varlen_attention import enable_varlen_attention, packed_forward
from verl.protocol import DataProto
from verl.utils.torch_masked import masked_mean
from verl.utils.ulysses import gather_outputs_and_unpad, resolve_ulysses_group, ulysses_sequence_parallel
from verl.workers.config import CriticConfig
from verl.workers.critic.base import BasePPOCritic
from verl.workers.micro_batching import (
    forwards_context,
    make_micro_batches,
    metric_value,
    module_device,
    restore_order,
)
from verl.workers.nonfinite_grads import NonFiniteGradStreak
from verl.workers.update_loop import ppo_update
from verl.workers.vision_rows import hf_position_ids, images_in_shard, select_with_rows, vision_kwargs

__all__ = ["DataParallelPPOCritic"]

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]


class DataParallelPPOCritic(BasePPOCritic):
    def __init__(self, config: CriticConfig, critic_module: torch.nn.Module,
                 critic_optimizer: torch.optim.Optimizer | None = None, ulysses_group=None) -> None:
        """``config``: a FSDPCriticConfig. ``ulysses_group``: the sequence-parallel group when
        ``config.ulysses_sequence_parallel_size`` > 1 (default: the worker's, as the actor)."""
        super().__init__(config)
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self._update_calls = 0
        # consecutive optimizer steps skipped for a NaN/inf grad norm; a streak this long stops the run
        self._nonfinite_streak = NonFiniteGradStreak(
            "critic", getattr(config, "max_consecutive_nonfinite_grad_skips", None), "critic.max_consecutive_nonfinite_grad_skips")
        self.use_remove_padding = config.model.use_remove_padding
        sp_size = int(getattr(config, "ulysses_sequence_parallel_size", 1) or 1)
        self.ulysses_group = resolve_ulysses_group(sp_size, "critic.ulysses_sequence_parallel_size", ulysses_group)
        if self.ulysses_group is not None and not self.use_remove_padding:
            raise ValueError(f"critic.ulysses_sequence_parallel_size={sp_size} splits packed rows; set "
                             "critic.model.use_remove_padding=true")
        if self.use_remove_padding:
            enable_varlen_attention(critic_module, sequence_parallel=self.ulysses_group is not None)
        # critic.model.fsdp_config.pad_to_length (later upstream's critic.fsdp): verl.models.packing.length_bucket
        self._length_bucket = length_bucket(getattr(config.model, "fsdp_config", None), sp_size)
        self._multi_modal_inputs = None  # a VLM batch's per-row pixel_values / image_grid_thw, during one call

    def _select(self, data: DataProto, keys: list[str]) -> DataProto:
        selected, self._multi_modal_inputs = select_with_rows(data, keys)
        return selected

    def step_state(self) -> dict[str, int]:
        """What shapes the next update beyond weights and optimizer: the update count seeds the shuffle."""
        return {"update_calls": self._update_calls, "nonfinite_grad_streak": self._nonfinite_streak.count}

    def load_step_state(self, state: Mapping[str, int]) -> None:
        self._update_calls = int(state["update_calls"])
        self._nonfinite_streak.count = int(state.get("nonfinite_grad_streak", 0))  # absent in older checkpoints

    def _forward_micro_batch(self, micro_batch: TensorDict) -> torch.Tensor:
        response_length = micro_batch["responses"].size(-1)
        if self.use_remove_padding:
            return self._forward_packed(micro_batch, response_length)
        output = self.critic_module(input_ids=micro_batch["input_ids"], attention_mask=micro_batch["attention_mask"],
                                    position_ids=hf_position_ids(micro_batch["position_ids"]), use_cache=False,
                                    **vision_kwargs(micro_batch, self._multi_modal_inputs))
        return values_from_output(output)[:, -response_length - 1 : -1]

    def _forward_packed(self, micro_batch: TensorDict, response_length: int) -> torch.Tensor:
        """Values read at the packed positions before each real response token; zeros on response padding."""
        attention_mask = micro_batch["attention_mask"]
        packed = pack_sequences(micro_batch["input_ids"], attention_mask, micro_batch["position_ids"],
                                self._length_bucket)
        targets = attention_mask[:, -response_length:].bool()
        predictors = packed.token_index[:, -response_length - 1 : -1][targets]
        if bool((predictors < 0).any()):
            raise ValueError("critic.model.use_remove_padding: a response token follows a padding position; expected "
                             "a left-padded prompt and a right-padded response")
        if self.ulysses_group is None:
            with packed_forward():
                output = self.critic_module(use_cache=False, **packed.model_inputs(),
                                            **vision_kwargs(micro_batch, self._multi_modal_inputs))
            return scatter_to_padded(values_from_output(output)[0, predictors], targets)
        # Ulysses: values of this rank's T/sp tokens, gathered over the SP group (verl.utils.ulysses)
        group = self.ulysses_group
        shard = shard_for_sequence_parallel(packed, group)
        images = vision_kwargs(micro_batch, self._multi_modal_inputs)
        with packed_forward(), ulysses_sequence_parallel(group), \
                images_in_shard(self.critic_module, packed, shard, images):
            output = self.critic_module(use_cache=False, **shard.inputs)
        values = gather_outputs_and_unpad(values_from_output(output)[0], gather_dim=0, padding_size=shard.pad,
                                          group=group)
        return scatter_to_padded(values[predictors], targets)

    @staticmethod
    def _response_mask(batch: TensorDict) -> torch.Tensor:
        if "response_mask" in batch.keys():
            return batch["response_mask"]
        return batch["attention_mask"][:, -batch["responses"].size(-1):]

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values (bs, R), zero where response_mask is 0; no grad.

        Micro-batching: meta_info ``micro_batch_size`` / ``use_dynamic_bsz`` / ``max_token_len`` when the worker
        sets them, else critic.forward_micro_batch_size_per_gpu / use_dynamic_bsz / forward_max_token_len_per_gpu.
        """
        meta = data.meta_info
        micro_batch_size = meta.get("micro_batch_size", self.config.forward_micro_batch_size_per_gpu)
        use_dynamic_bsz = bool(meta.get("use_dynamic_bsz", self.config.use_dynamic_bsz))
        max_token_len = meta.get("max_token_len", self.config.forward_max_token_len_per_gpu)
        keys = _FORWARD_KEYS + (["response_mask"] if "response_mask" in data.batch.keys() else [])
        batch = self._select(data, keys).batch
        micro_batches, indices = make_micro_batches(
            batch, micro_batch_size, use_dynamic_bsz, max_token_len,
            "critic.forward_micro_batch_size_per_gpu / critic.forward_max_token_len_per_gpu")
        device = module_device(self.critic_module)
        values = []
        with torch.no_grad(), forwards_context(self.critic_module, len(micro_batches)):
            for micro_batch in micro_batches:
                micro_batch = micro_batch.to(device)
                values.append(self._forward_micro_batch(micro_batch) * self._response_mask(micro_batch))
        out_device = batch.device if batch.device is not None else batch["responses"].device
        return restore_order(values, indices).to(out_device)

    def update_critic(self, data: DataProto) -> dict[str, list[float]]:
        """Value-loss epochs over mini-batches with gradient accumulation; returns metric lists.

        Needs ``values`` (old values, for clipping) and ``returns``. Raises NonFiniteLossError on a NaN/inf loss.
        """
        if self.critic_optimizer is None:
            raise RuntimeError("update_critic: this critic was built without an optimizer; "
                               "pass critic_optimizer to DataParallelPPOCritic")
        loss_agg_mode = self.config.loss_agg_mode
        cliprange_value = self.config.cliprange_value

        def micro_loss(micro_batch: TensorDict) -> tuple[torch.Tensor, dict]:
            response_mask = micro_batch["response_mask"]
            vpreds = self._forward_micro_batch(micro_batch)
            vf_loss, vf_clipfrac = core_algos.compute_value_loss(
                vpreds=vpreds, returns=micro_batch["returns"], values=micro_batch["values"],
                response_mask=response_mask, cliprange_value=cliprange_value, loss_agg_mode=loss_agg_mode,
                loss_scale_factor=getattr(self.config, "loss_scale_factor", None))
            return vf_loss, {
                "critic/vf_loss": vf_loss.detach(),
                "critic/vf_clipfrac": metric_value(vf_clipfrac),
                "critic/vpred_mean": masked_mean(vpreds.detach(), response_mask),
            }

        seed = self._update_calls  # with config.data_loader_seed, the shuffle's seed (update_loop.shuffle_seed)
        self._update_calls += 1
        return ppo_update(self.config, "critic", self.critic_module, self.critic_optimizer,
                          self._select(data, _FORWARD_KEYS + ["response_mask", "values", "returns"]), micro_loss,
                          seed, self._nonfinite_streak)

