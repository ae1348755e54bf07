"""The data-parallel PPO actor: log-probs of responses and the clipped policy update, on one rank.

The module may be a plain ``nn.Module`` or an FSDP2 (``fully_shard``) one; nothing here depends on which.
Every rank of the worker group calls the same method with its own shard of the batch, and every rank runs the
same number of forwards/backwards (see ``verl.workers.micro_batching``).

Batch sizes (as the worker hands them over, already normalised):
- ``ppo_mini_batch_size``: responses per optimizer step *on this rank* — the worker multiplies the user's
  prompt count by ``rollout.n`` and divides by the data-parallel size before constructing this class.
- ``ppo_micro_batch_size_per_gpu``: rows per forward/backward (gradient accumulation within a mini-batch), or
  with ``use_dynamic_bsz`` micro-batches of at most ``ppo_max_token_len_per_gpu`` real tokens.

Micro-batch losses are weighted so the accumulated gradient is the gradient of the mini-batch loss as defined
by ``loss_agg_mode`` (token-mean: each micro-batch's share of the mini-batch's response tokens), so results do
not depend on the micro-batch size. Across ranks FSDP averages gradients, so the step follows the mean of the
ranks' mini-batch losses; the clipped grad norm is the global one. The LR scheduler is stepped by the worker.

``use_remove_padding``: each micro-batch's real tokens are packed into one row (``verl.models.packing``) with
per-sample attention (``verl.models.varlen_attention``), and the LM head runs only on positions that predict a real
response token — the same log-probs as the padded path, without compute on padding.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict

from verl import algos as core_algos
from verl.algos.rollout_correction import ROLLOUT_CORRECTION_META_KEY, bypass_mode_policy_loss
from verl.algos.tis import tis_weights
from verl.models.packing import (
    accepts_logits_to_keep,
    length_bucket,
    logits_at,
    pack_sequences,
    scatter_to_padded,
    shard_for_sequence_parallel,
)
from verl.models.varlen_attention import enable_varlen_attention, packed_forward
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.utils.torch_functional import logprobs_from_logits
from verl.utils.ulysses import gather_outputs_and_unpad, resolve_ulysses_group, ulysses_sequence_parallel
from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.entropy import entropy_function, sum_pi_squared_function
from verl.workers.actor.on_policy import EntropyTally, check_single_step, wants_on_policy
from verl.workers.actor.prefix_grouped import enable_prefix_grouping, prefix_grouped_forward
from verl.workers.actor.router_replay import ActorRouting, log_prob_pass, routed_micro_batch, routing_keys, update_pass
from verl.workers.config import ActorConfig, RefConfig
from verl.workers.micro_batching import (
    NonFiniteLossError,
    forwards_context,
    make_micro_batches,
    metric_value,
    module_device,
    require_meta,
    restore_order,
)
from verl.workers.nonfinite_grads import NonFiniteGradStreak
from verl.workers.update_loop import ppo_update
from verl.workers.vision_rows import hf_position_ids, images_in_shard, select_with_rows, vision_kwargs

__all__ = ["DataParallelPPOActor", "NonFiniteLossError", "accepts_logits_to_keep"]

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]


class DataParallelPPOActor(BasePPOActor):
    def __init__(self, config: ActorConfig | RefConfig, actor_module: torch.nn.Module,
                 actor_optimizer: torch.optim.Optimizer | None = None, ulysses_group=None) -> None:
        """``config``: an FSDPActorConfig (or a RefConfig for a reference policy, which never updates).

        ``ulysses_group``: the sequence-parallel group when ``config.ulysses_sequence_parallel_size`` > 1 (default:
        the worker's, ``verl.utils.ulysses.set_ulysses_sequence_parallel_group``)."""
        super().__init__(config)
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        self._logits_to_keep = accepts_logits_to_keep(actor_module)
        self._update_calls = 0  # varies the shuffle seed from one training step to the next
        self._entropy = entropy_function(config)
        self._sum_pi_squared = sum_pi_squared_function(config)
        self.last_sum_pi_squared: torch.Tensor | None = None
        # consecutive optimizer steps skipped for a NaN/inf grad norm; a streak this long stops the run
        self._nonfinite_streak = NonFiniteGradStreak(
            "actor", getattr(config, "max_consecutive_nonfinite_grad_skips", None), "actor_rollout_ref.actor.max_consecutive_nonfinite_grad_skips")
        # follows actor_rollout_ref.model.use_remove_padding (the yaml interpolates it), as upstream
        self.use_remove_padding = config.use_remove_padding
        sp_size = int(getattr(config, "ulysses_sequence_parallel_size", 1) or 1)
        self.ulysses_group = resolve_ulysses_group(sp_size, "actor.ulysses_sequence_parallel_size", ulysses_group)
        if self.ulysses_group is not None and not self.use_remove_padding:
            raise ValueError(f"actor.ulysses_sequence_parallel_size={sp_size} splits packed rows; set "
                             "actor_rollout_ref.model.use_remove_padding=true")
        if self.use_remove_padding:
            enable_varlen_attention(actor_module, sequence_parallel=self.ulysses_group is not None)
        # fsdp_config.pad_to_length: packed rows padded up to a multiple of the bucket (verl.models.packing)
        self._length_bucket = length_bucket(getattr(config, "fsdp_config", None), sp_size)
        self._multi_modal_inputs = None  # the batch's per-row pixel_values / image_grid_thw, during one call
        # a VLM's responses never hold vision tokens: the rollout cannot sample them (verl.models.vision)
        self._vision_token_ids = vision_token_ids(getattr(actor_module, "config", None))
        # actor.router_replay.mode R2 / R3: record / replay MoE routing (verl.models.router_replay)
        self._routing = ActorRouting.for_actor(config, actor_module, self.use_remove_padding)
        if self._length_bucket and self._routing is not None:
            raise ValueError("pad_to_length does not combine with router_replay (as upstream): the recorded routes "
                             "cover the real tokens only; set pad_to_length=false")
        self.last_routed_experts: torch.Tensor | None = None  # R2: what the last log-prob pass recorded
        # actor.use_prefix_grouper: one forward per distinct prompt (verl.workers.actor.prefix_grouped)
        self.use_prefix_grouper = enable_prefix_grouping(config, actor_module)

    def _select(self, data: DataProto, keys: list[str]) -> DataProto:
        """``data`` restricted to ``keys``, plus row numbers when it carries images for the forward."""
        selected, self._multi_modal_inputs = select_with_rows(data, keys)
        return selected

    def _vision_kwargs(self, micro_batch: TensorDict) -> dict:
        return vision_kwargs(micro_batch, self._multi_modal_inputs)

    # -- state that shapes the next update (saved with the checkpoint's extra state) -------------------------------

    def step_state(self) -> dict[str, int]:
        return {"update_calls": self._update_calls, "nonfinite_grad_streak": self._nonfinite_streak.count}

    def load_step_state(self, state: Mapping[str, int]) -> None:
        self._update_calls = int(state["update_calls"])
        self._nonfinite_streak.count = int(state.get("nonfinite_grad_streak", 0))  # absent in older checkpoints

    # -- forward -------------------------------------------------------------------------------------------------

    def _forward_micro_batch(self, micro_batch: TensorDict, temperature: float, calculate_entropy: bool,
                             sum_pi_squared: list | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of the response tokens: logits at positions P-1 .. P+R-2 predict them.
        ``sum_pi_squared``: a list that receives the micro-batch's (bs, R) sum_v pi_v^2 (optimal token baseline)."""
        if self.use_prefix_grouper:
            return prefix_grouped_forward(self, micro_batch, temperature, calculate_entropy, sum_pi_squared)
        if self.use_remove_padding:
            return self._forward_packed(micro_batch, temperature, calculate_entropy, sum_pi_squared)
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        kwargs = self._vision_kwargs(micro_batch)
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = response_length + 1
        output = self.actor_module(input_ids=micro_batch["input_ids"], attention_mask=micro_batch["attention_mask"],
                                   position_ids=hf_position_ids(micro_batch["position_ids"]), use_cache=False, **kwargs)
        logits = output.logits[:, -response_length - 1 : -1, :]
        if temperature != 1.0:
            logits = logits / temperature
        logits = suppress_vision_tokens(logits, self._vision_token_ids)
        log_probs = logprobs_from_logits(logits, responses)
        entropy = self._entropy(logits) if calculate_entropy else None
        if sum_pi_squared is not None:
            sum_pi_squared.append(self._sum_pi_squared(logits))
        return log_probs, entropy

    def _forward_packed(self, micro_batch: TensorDict, temperature: float, calculate_entropy: bool,
                        sum_pi_squared: list | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The same numbers from the real tokens only: one packed row, the LM head on the positions that predict
        real response tokens; zeros where the response is padding (those entries are masked downstream)."""
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        attention_mask = micro_batch["attention_mask"]
        packed = pack_sequences(micro_batch["input_ids"], attention_mask, micro_batch["position_ids"],
                                self._length_bucket)
        targets = attention_mask[:, -response_length:].bool()
        predictors = packed.token_index[:, -response_length - 1 : -1][targets]
        if bool((predictors < 0).any()):
            raise ValueError("use_remove_padding: a response token follows a padding position; expected a "
                             "left-padded prompt and a right-padded response (attention_mask 0 only at the ends)")
        if self.ulysses_group is not None:
            return self._forward_sequence_parallel(packed, predictors, responses[targets], targets, temperature,
                                                   calculate_entropy, sum_pi_squared, self._vision_kwargs(micro_batch))
        # at least one position, so every rank runs the LM head and its backward (FSDP collectives need that)
        keep = predictors if predictors.numel() else predictors.new_zeros(1)
        with packed_forward():
            # squeeze (a view), not [0]: a select's or slice's backward zero-fills a gradient of all the logits
            logits = logits_at(self.actor_module, keep, self._logits_to_keep, use_cache=False,
                               **packed.model_inputs(), **self._vision_kwargs(micro_batch)).squeeze(0)
        if keep is not predictors:
            logits = logits[: predictors.numel()]
        if temperature != 1.0:
            logits = logits / temperature
        logits = suppress_vision_tokens(logits, self._vision_token_ids)
        log_probs = scatter_to_padded(logprobs_from_logits(logits, responses[targets]), targets)
        entropy = scatter_to_padded(self._entropy(logits), targets) if calculate_entropy else None
        if sum_pi_squared is not None:
            sum_pi_squared.append(scatter_to_padded(self._sum_pi_squared(logits), targets))
        return log_probs, entropy

    def _forward_sequence_parallel(self, packed, predictors: torch.Tensor, labels: torch.Tensor,
                                   targets: torch.Tensor, temperature: float, calculate_entropy: bool,
                                   sum_pi_squared: list | None = None, images: dict | None = None,
                                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Ulysses: this rank runs its T/sp tokens; the LM head only on its own predictor positions; the per-token
        results are gathered over the SP group (same on every rank of it) and read at ``predictors``. ``images``:
        the micro-batch's pixel_values / image_grid_thw (every rank embeds the whole row with them)."""
        group = self.ulysses_group
        shard = shard_for_sequence_parallel(packed, group)
        mine = shard.local(predictors)
        inside = (predictors >= shard.start) & (predictors < shard.start + shard.width)
        local_labels = torch.zeros(shard.width, dtype=labels.dtype, device=labels.device)
        local_labels[predictors[inside] - shard.start] = labels[inside]
        keep = torch.nonzero(mine).squeeze(-1)
        count = keep.numel()
        if not count:  # still run the LM head (and its backward): FSDP's collectives need every rank in them
            keep = keep.new_zeros(1)
        with packed_forward(), ulysses_sequence_parallel(group), \
                images_in_shard(self.actor_module, packed, shard, images):
            logits = logits_at(self.actor_module, keep, self._logits_to_keep, use_cache=False,
                               **shard.inputs).squeeze(0)[:count]
        if temperature != 1.0:
            logits = logits / temperature
        logits = suppress_vision_tokens(logits, self._vision_token_ids)
        mask = mine[None]

        def gathered(local: torch.Tensor) -> torch.Tensor:
            full = gather_outputs_and_unpad(scatter_to_padded(local, mask)[0], gather_dim=0, padding_size=shard.pad,
                                            group=group)
            return scatter_to_padded(full[predictors], targets)

        log_probs = gathered(logprobs_from_logits(logits, local_labels[keep[:count]]))
        entropy = gathered(self._entropy(logits)) if calculate_entropy else None
        if sum_pi_squared is not None:
            sum_pi_squared.append(gathered(self._sum_pi_squared(logits)))
        return log_probs, entropy

    def compute_log_prob(self, data: DataProto, calculate_entropy: bool = False,
                         calculate_sum_pi_squared: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (bs, R) of ``responses`` under the current weights, without grad; entropies when asked.
        With ``calculate_sum_pi_squared``, also ``self.last_sum_pi_squared``: (bs, R) sum_v pi_v^2 at the same
        temperature (the optimal token baseline's input; zero on padding).

        meta_info: ``temperature``, ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len``.
        """
        temperature = _check_temperature(require_meta(data, "temperature", "compute_log_prob"))
        use_dynamic_bsz = bool(data.meta_info.get("use_dynamic_bsz", False))
        micro_batch_size = data.meta_info.get("micro_batch_size")
        max_token_len = data.meta_info.get("max_token_len")
        if not use_dynamic_bsz:
            micro_batch_size = require_meta(data, "micro_batch_size", "compute_log_prob")
        batch = self._select(data, _FORWARD_KEYS + routing_keys(self._routing, data.batch.keys())).batch
        micro_batches, indices = make_micro_batches(batch, micro_batch_size, use_dynamic_bsz, max_token_len,
                                                    "meta_info micro_batch_size / max_token_len")
        device = module_device(self.actor_module)
        log_probs, entropys = [], []
        sums = [] if calculate_sum_pi_squared else None
        with torch.no_grad(), forwards_context(self.actor_module, len(micro_batches)), \
                log_prob_pass(self._routing, batch.keys()):
            for micro_batch in micro_batches:
                micro_batch = micro_batch.to(device)
                with routed_micro_batch(self._routing, micro_batch):
                    log_prob, entropy = self._forward_micro_batch(micro_batch, temperature, calculate_entropy, sums)
                log_probs.append(log_prob)
                if entropy is not None:
                    entropys.append(entropy)
        out_device = batch.device if batch.device is not None else batch["responses"].device
        log_probs_out = restore_order(log_probs, indices).to(out_device)
        entropys_out = restore_order(entropys, indices).to(out_device) if calculate_entropy else None
        self.last_sum_pi_squared = restore_order(sums, indices).to(out_device) if sums is not None else None
        records = self._routing.take_records() if self._routing is not None else []
        self.last_routed_experts = restore_order(records, indices) if records else None
        return log_probs_out, entropys_out

    # -- update --------------------------------------------------------------------------------------------------

    def _micro_loss(self, micro_batch: TensorDict, temperature: float, loss_fn, loss_agg_mode: str,
                    on_policy: EntropyTally | None = None) -> tuple[torch.Tensor, dict]:
        """The micro-batch's policy loss (before its share weighting) and its metrics. ``on_policy``: the
        old-log-prob pass was skipped, so this forward is pi_old's; its entropy goes to the tally."""
        entropy_coeff = self.config.entropy_coeff
        response_mask = micro_batch["response_mask"]
        # actor.calculate_entropy: the entropy for its metric alone, when entropy_coeff leaves it out of the loss
        wants_entropy = entropy_coeff != 0 or self.config.calculate_entropy or on_policy is not None
        with routed_micro_batch(self._routing, micro_batch):
            log_prob, entropy = self._forward_micro_batch(micro_batch, temperature, calculate_entropy=wants_entropy)
        if on_policy is not None:
            old_log_prob = log_prob.detach()  # one optimizer step after all forwards: ratio 1 here, as in the pass
            on_policy.add(entropy.detach(), response_mask)
            if entropy_coeff == 0:
                entropy = None  # only the metric wanted it (the tally reports it): drop its graph now
        else:
            old_log_prob = micro_batch["old_log_probs"]
        loss_kwargs = {}
        if "rollout_is_weights" in micro_batch.keys():
            loss_kwargs["rollout_is_weights"] = micro_batch["rollout_is_weights"]
        if self.config.tis_imp_ratio_cap > 0:  # upstream's truncated IS (verl.algos.tis)
            loss_kwargs["rollout_is_weights"] = tis_weights(old_log_prob, micro_batch, self.config.tis_imp_ratio_cap)
        pg_loss, pg_metrics = loss_fn(old_log_prob=old_log_prob, log_prob=log_prob,
                                      advantages=micro_batch["advantages"], response_mask=response_mask,
                                      loss_agg_mode=loss_agg_mode, config=self.config, **loss_kwargs)
        metrics = {"actor/pg_loss": pg_loss.detach()}
        metrics.update({k if k.startswith(("actor/", "rollout_corr/")) else f"actor/{k}": metric_value(v)
                        for k, v in pg_metrics.items()})
        policy_loss = pg_loss
        if entropy is not None and entropy_coeff == 0:  # calculate_entropy: the metric, no graph kept for it
            metrics["actor/entropy"] = core_algos.agg_loss(entropy.detach(), response_mask, loss_agg_mode)
        elif entropy is not None:
            entropy_loss = core_algos.agg_loss(entropy, response_mask, loss_agg_mode)
            policy_loss = policy_loss - entropy_coeff * entropy_loss
            metrics["actor/entropy"] = entropy_loss.detach()
        if self.config.use_kl_loss:
            kl_coef = self.config.kl_loss_coef
            kld = core_algos.kl_penalty(logprob=log_prob, ref_logprob=micro_batch["ref_log_prob"],
                                        kl_penalty=self.config.kl_loss_type)
            kl_loss = core_algos.agg_loss(kld, response_mask, loss_agg_mode)
            policy_loss = policy_loss + kl_coef * kl_loss
            metrics["actor/kl_loss"] = kl_loss.detach()
            metrics["actor/kl_coef"] = kl_coef
        return policy_loss, metrics

    def update_policy(self, data: DataProto) -> dict[str, list[float]]:
        """PPO epochs over mini-batches with gradient accumulation; returns metric lists (upstream names).

        Raises NonFiniteLossError when a micro-batch loss is NaN/inf (grads zeroed, no step taken). A non-finite
        grad norm alone skips that optimizer step and is recorded (actor/grad_norm, actor/grad_norm_nonfinite).
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy: this actor was built without an optimizer (a reference policy?); "
                               "pass actor_optimizer to DataParallelPPOActor")
        temperature = _check_temperature(require_meta(data, "temperature", "update_policy"))
        loss_agg_mode = self.config.loss_agg_mode
        loss_fn = core_algos.get_policy_loss_fn(self.config.policy_loss.loss_mode)
        correction = data.meta_info.get(ROLLOUT_CORRECTION_META_KEY)
        if correction is not None:  # bypass mode: old_log_probs are pi_rollout; IS/RS against pi_theta in the loss
            loss_fn = bypass_mode_policy_loss(loss_fn, correction)
        # on_policy: the trainer skipped the old-log-prob pass (verl.trainer.config.old_log_prob_reuse)
        tally = EntropyTally(loss_agg_mode) if wants_on_policy(data) else None
        if tally is not None:
            check_single_step(self.config, len(data))
        select_keys = _FORWARD_KEYS + ["response_mask", "advantages"]
        if tally is None:
            select_keys.append("old_log_probs")
        if self.config.use_kl_loss:
            select_keys.append("ref_log_prob")
        for optional in ("rollout_log_probs", "rollout_is_weights"):
            if optional in data.batch.keys():
                select_keys.append(optional)
        select_keys += routing_keys(self._routing, data.batch.keys())
        seed = self._update_calls  # with config.data_loader_seed, the shuffle's seed (update_loop.shuffle_seed)
        self._update_calls += 1
        with update_pass(self._routing, data.batch.keys(), on_policy=tally is not None):
            metrics = ppo_update(self.config, "actor", self.actor_module, self.actor_optimizer,
                                 self._select(data, select_keys),
                                 lambda micro_batch: self._micro_loss(micro_batch, temperature, loss_fn,
                                                                      loss_agg_mode, tally), seed, self._nonfinite_streak)
        if tally is not None:  # what the pass reported: the whole batch's entropy, replacing per-micro-batch values
            entropy = tally.value(module_device(self.actor_module))
            if entropy is not None:
                metrics["actor/entropy"] = entropy
        return metrics


def _check_temperature(temperature) -> float:
    temperature = float(temperature)
    if not temperature > 0:
        raise ValueError(f"meta_info['temperature'] must be > 0 for log-probs (the rollout temperature), "
                         f"got {temperature}")
    return temperature

