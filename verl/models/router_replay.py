"""MoE router replay for HF models: record the top-k experts each token was routed to, and force them later.

Upstream verl's ``actor_rollout_ref.actor.router_replay.mode`` (R2 / R3) patches Megatron's top-k router; this is
the same idea for transformers' sparse-MoE blocks (Qwen2-MoE, Qwen3-MoE, Qwen3.5-MoE, OLMoE, Mixtral). Each of
those blocks asks its router module (``block.gate``, a ``*TopKRouter``) for ``(router_logits, routing_weights,
selected_experts)``; a forward hook on the router

- in **record** mode keeps ``selected_experts`` (tokens, top_k) of every call, layer by layer;
- in **replay** mode replaces the selection by the given one and recomputes the weights from the *current*
  router logits over the replayed experts, as upstream's replay does (``scores.gather(replayed)``): softmax over all
  experts, gathered at the replayed ones, renormalised when the router renormalises its top-k (``norm_topk_prob``,
  always for Mixtral / Qwen3.5). Only the discrete choice is replayed: gradients still flow into the router.

A record is laid out as upstream's ``routed_experts`` batch key: (batch, sequence, moe_layers, top_k) aligned
with ``input_ids``, one slot per MoE layer in model order; ``NOT_ROUTED`` (-1) where no routing was recorded
(padding in the packed path, the last token of a generated sequence, which is never fed to the model). Replaying
``NOT_ROUTED`` leaves that token's own routing. ``ReplayTargets`` converts between that layout and the flat token
stream the model sees (every (row, column) of a padded batch, or the real tokens of a packed row).

Replay targets stay set until ``clear`` (or the next ``set_replay``), so a forward recomputed in backward
(gradient checkpointing) routes as the first one did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = ["ROUTED_EXPERTS_KEY", "NOT_ROUTED", "RouterReplay", "find_routers", "flat_targets", "unflatten_record",
           "moe_config_problem", "ROUTER_CLASSES", "generation_record", "RECORD_DTYPE", "routing_canvas",
           "place_record"]

ROUTED_EXPERTS_KEY = "routed_experts"  # upstream's DataProto key
NOT_ROUTED = -1
RECORD_DTYPE = torch.int16  # expert ids < 32768; -1 marks tokens without a record

# router class -> whether it renormalises its top-k weights: True, or the name of the attribute that says so
ROUTER_CLASSES: dict[str, bool | str] = {
    "Qwen2MoeTopKRouter": "norm_topk_prob",
    "Qwen3MoeTopKRouter": "norm_topk_prob",
    "OlmoeTopKRouter": "norm_topk_prob",
    "MixtralTopKRouter": True,
    "Qwen3_5MoeTopKRouter": True,
}
# config fields that make an HF config a mixture of experts
_EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def _router_kind(module: torch.nn.Module) -> bool | str | None:
    for cls in type(module).__mro__:  # FSDP2's fully_shard subclasses the module's class
        if cls.__name__ in ROUTER_CLASSES:
            return ROUTER_CLASSES[cls.__name__]
    return None


def find_routers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The supported top-k routers of ``model`` in module order (= layer order)."""
    return [(name, m) for name, m in model.named_modules() if _router_kind(m) is not None]


def moe_config_problem(config) -> str | None:
    """Why router replay cannot run on a model with this HF config (a PretrainedConfig or its config.json dict),
    or None. Reads only the config, so the driver can ask before Ray starts."""
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    text = get("text_config")
    if text is not None and not any(get(f) for f in _EXPERT_COUNT_FIELDS):
        return moe_config_problem(text)
    experts = next((get(f) for f in _EXPERT_COUNT_FIELDS if get(f)), None)
    model_type = get("model_type")
    if not experts:
        return (f"the model (model_type={model_type!r}) is not a mixture of experts: its config has none of "
                f"{', '.join(_EXPERT_COUNT_FIELDS)}; there is no routing to replay")
    supported = {"qwen2_moe", "qwen3_moe", "qwen3_5_moe", "qwen3_5_moe_text", "olmoe", "mixtral"}
    if model_type not in supported:
        return (f"router replay is built for the HF top-k routers of {', '.join(sorted(supported))}; this model's "
                f"model_type is {model_type!r}")
    return None


class RouterReplay:
    """Record / replay hooks on every supported router of ``model`` (installed once; idle until asked)."""

    def __init__(self, model: torch.nn.Module) -> None:
        routers = find_routers(model)
        if not routers:
            problem = moe_config_problem(getattr(model, "config", {}) or {})
            raise ValueError("router replay (actor_rollout_ref.actor.router_replay.mode / "
                             "rollout.enable_rollout_routing_replay): "
                             + (problem or f"no supported MoE router ({', '.join(ROUTER_CLASSES)}) in "
                                           f"{type(model).__name__}"))
        self.top_k = int(routers[0][1].top_k)
        self.num_layers = len(routers)
        self._mode: str | None = None
        self._records: list[list[torch.Tensor]] = [[] for _ in routers]
        self._targets: torch.Tensor | None = None  # (tokens, layers, top_k) long
        self._handles = [m.register_forward_hook(self._hook(i, m)) for i, (_, m) in enumerate(routers)]

    @classmethod
    def of(cls, model: torch.nn.Module) -> RouterReplay:
        """The model's one instance (hooks are installed the first time)."""
        existing = getattr(model, "_verl_router_replay", None)
        if existing is None:
            existing = cls(model)
            object.__setattr__(model, "_verl_router_replay", existing)  # not a submodule / parameter
        return existing

    # -- modes ---------------------------------------------------------------------------------------------------

    @contextmanager
    def record(self) -> Iterator[list[list[torch.Tensor]]]:
        """Within: every router call appends its (tokens, top_k) selection to its layer's list (yielded)."""
        if self._mode is not None:
            raise RuntimeError(f"router replay: already in {self._mode} mode")
        self._records = [[] for _ in range(self.num_layers)]
        self._mode = "record"
        try:
            yield self._records
        finally:
            self._mode = None

    def take_record(self) -> torch.Tensor:
        """The one forward recorded since ``record`` began: (tokens, layers, top_k); the lists are emptied."""
        if any(len(chunks) != 1 for chunks in self._records):
            raise RuntimeError(f"router replay: expected one recorded forward per layer, got "
                               f"{[len(c) for c in self._records]}")
        out = torch.stack([chunks[0] for chunks in self._records], dim=1)
        self._records = [[] for _ in range(self.num_layers)]
        return out

    def set_replay(self, targets: torch.Tensor) -> None:
        """Route the next forwards' tokens (flat, in the order the model sees them) to ``targets`` (tokens, layers,
        top_k); NOT_ROUTED rows keep their own routing. Stays set until ``clear``."""
        if targets.dim() != 3 or targets.size(1) != self.num_layers or targets.size(2) != self.top_k:
            raise ValueError(f"router replay: routed_experts has {tuple(targets.shape[1:])} (layers, top_k) per "
                             f"token; this model has {self.num_layers} MoE layers with top_k={self.top_k}. Was "
                             "it recorded with another model?")
        if self._mode == "record":
            raise RuntimeError("router replay: cannot replay while recording")
        self._targets = targets.long()
        self._mode = "replay"

    def clear(self) -> None:
        """Back to the model's own routing; drops targets and records."""
        if self._mode == "replay":
            self._mode = None
        self._targets = None
        self._records = [[] for _ in range(self.num_layers)]

    @property
    def mode(self) -> str | None:
        return self._mode

    # -- the hook ------------------------------------------------------------------------------------------------

    def _hook(self, layer: int, router: torch.nn.Module):
        kind = _router_kind(router)

        def hook(module, args, output):
            if self._mode is None:
                return None
            logits, weights, selected = output
            if self._mode == "record":
                self._records[layer].append(selected.detach().to(RECORD_DTYPE))
                return None
            target = self._targets[:, layer].to(selected.device)
            if target.size(0) != selected.size(0):
                raise ValueError(f"router replay: layer {layer} routes {selected.size(0)} tokens but routed_experts "
                                 f"holds {target.size(0)}; the record does not align with this batch's tokens")
            chosen = torch.where(target < 0, selected, target)
            probs = torch.softmax(logits.float(), dim=-1)
            new_weights = probs.gather(-1, chosen)
            renormalise = kind if isinstance(kind, bool) else bool(getattr(module, kind, False))
            if renormalise:
                new_weights = new_weights / new_weights.sum(dim=-1, keepdim=True)
            return logits, new_weights.to(weights.dtype), chosen.to(selected.dtype)

        return hook


# -- layouts --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLayout:
    """How a (bs, L) micro-batch reaches the routers: every position (padded) or the real ones in row order
    (packed, ``verl.models.packing.pack_sequences``)."""

    attention_mask: torch.Tensor
    packed: bool

    def flatten(self, routed: torch.Tensor) -> torch.Tensor:
        """(bs, L, layers, k) -> (tokens, layers, k) in the model's token order."""
        if routed.shape[:2] != self.attention_mask.shape:
            raise ValueError(f"router replay: routed_experts {tuple(routed.shape)} does not match the batch's "
                             f"attention_mask {tuple(self.attention_mask.shape)} (batch, sequence)")
        if self.packed:
            return routed[self.attention_mask.bool()]
        return routed.reshape(-1, *routed.shape[2:])

    def unflatten(self, flat: torch.Tensor) -> torch.Tensor:
        """(tokens, layers, k) -> (bs, L, layers, k); NOT_ROUTED where the model saw no token."""
        bs, length = self.attention_mask.shape
        if not self.packed:
            return flat.reshape(bs, length, *flat.shape[1:])
        out = flat.new_full((bs, length, *flat.shape[1:]), NOT_ROUTED)
        out[self.attention_mask.bool()] = flat
        return out


def flat_targets(routed: torch.Tensor, attention_mask: torch.Tensor, packed: bool) -> torch.Tensor:
    return TokenLayout(attention_mask, packed).flatten(routed)


def unflatten_record(flat: torch.Tensor, attention_mask: torch.Tensor, packed: bool) -> torch.Tensor:
    return TokenLayout(attention_mask, packed).unflatten(flat)


def generation_record(records: list[list[torch.Tensor]], rows: int, fed_positions: int,
                      width: int) -> torch.Tensor:
    """The record of one ``generate`` call (prefill over the prompt, then one token per step) as (rows, width,
    layers, k): position p holds the routing of the token at p; NOT_ROUTED from ``fed_positions`` on (the last
    generated token is never fed back; a rank that finished early under ``synced_gpus`` steps on without
    appending, so its extra calls are dropped)."""
    layers = []
    for chunks in records:
        steps = torch.cat([c.reshape(rows, -1, c.size(-1)) for c in chunks], dim=1)[:, :fed_positions]
        layers.append(steps)
    seq = torch.stack(layers, dim=2)  # (rows, fed, layers, k)
    out = seq.new_full((rows, width, *seq.shape[2:]), NOT_ROUTED)
    out[:, : seq.size(1)] = seq
    return out


def routing_canvas(records: list, width: int, where: str) -> torch.Tensor | None:
    """An all-NOT_ROUTED (len(records), width, layers, k) tensor when some of ``records`` (per-sequence
    (tokens, layers, k) records, or None) is given, else None; records of different (layers, k) raise."""
    shapes = {tuple(r.shape[1:]) for r in records if r is not None}
    if not shapes:
        return None
    if len(shapes) > 1:
        raise ValueError(f"{where}: routed_experts of different (moe_layers, top_k) shapes {sorted(shapes)} in one "
                         "batch; every sequence must be recorded by the same model")
    return torch.full((len(records), width, *shapes.pop()), NOT_ROUTED, dtype=RECORD_DTYPE)


def place_record(row: torch.Tensor, record, n_prompt: int, n_response: int, prompt_length: int) -> None:
    """Write one sequence's record (its prompt tokens, then its response tokens, from the start; it may stop short,
    as an engine's does before the last generated token) at its input_ids columns in ``row``: the prompt left-padded
    to ``prompt_length``, the response from there, ``n_response`` tokens kept."""
    record = torch.as_tensor(record).to(row.dtype)
    in_prompt = min(record.size(0), n_prompt)
    row[prompt_length - n_prompt: prompt_length - n_prompt + in_prompt] = record[:in_prompt]
    in_response = max(0, min(record.size(0) - n_prompt, n_response))
    row[prompt_length: prompt_length + in_response] = record[n_prompt: n_prompt + in_response]
