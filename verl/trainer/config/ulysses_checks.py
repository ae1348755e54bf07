"""Ulysses sequence parallelism (``*.ulysses_sequence_parallel_size``): the combinations the workers (main_ppo)
or the SFT trainer cannot run, refused before Ray or any rank starts. The split itself is verl.utils.ulysses;
divisibility of the GPUs by sp and the token budgets are in checks.py with the other batch arithmetic.
``log_sequence_parallel_layout`` names the layout each role will run with, once, on the driver before Ray."""

from __future__ import annotations

import logging
from typing import Any

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

ARR = "actor_rollout_ref"

logger = logging.getLogger(__name__)


def check_ulysses(cfg: PPOTrainerConfig) -> list[str]:
    arr, problems = cfg.actor_rollout_ref, []
    actor_sp, ref_sp = arr.actor.ulysses_sequence_parallel_size, arr.ref.ulysses_sequence_parallel_size
    if max(actor_sp, ref_sp) > 1 and not arr.model.use_remove_padding:
        problems.append(f"{ARR}.actor.ulysses_sequence_parallel_size={actor_sp} (ref: {ref_sp}) splits packed "
                        f"sequences; set {ARR}.model.use_remove_padding=true.")
    if cfg.use_reference_policy and ref_sp != actor_sp:
        problems.append(f"{ARR}.ref.ulysses_sequence_parallel_size={ref_sp} differs from {ARR}.actor."
                        f"ulysses_sequence_parallel_size={actor_sp}: the reference runs in the actor's worker and "
                        "shares its sequence-parallel group; leave the ref's at its default (the actor's).")
    critic_sp = cfg.critic.ulysses_sequence_parallel_size
    if cfg.use_critic and critic_sp > 1 and not cfg.critic.model.use_remove_padding:
        problems.append(f"critic.ulysses_sequence_parallel_size={critic_sp} splits packed sequences; set "
                        "critic.model.use_remove_padding=true.")
    return problems


def sequence_parallel_layout(cfg: PPOTrainerConfig) -> str | None:
    """One line naming data parallel x sequence parallel for every role this run builds, when any of them splits
    sequences (None when none does): ``world / sp`` data-parallel groups of ``sp`` ranks each."""
    arr, world = cfg.actor_rollout_ref, cfg.world_size
    roles = [("actor", arr.actor.ulysses_sequence_parallel_size, "")]
    if cfg.use_reference_policy:
        where = " (the actor's module, adapter off)" if cfg.ref_in_actor else ""
        roles.append(("ref", arr.ref.ulysses_sequence_parallel_size, where))
    if cfg.use_critic:
        roles.append(("critic", cfg.critic.ulysses_sequence_parallel_size, ""))
    if all(sp == 1 for _, sp, _ in roles):
        return None
    parts = [f"{name} {world // sp} dp x {sp} sp{where}" for name, sp, where in roles]
    return f"sequence parallel (Ulysses) over {world} ranks: " + ", ".join(parts)


def log_sequence_parallel_layout(cfg: PPOTrainerConfig) -> str | None:
    """Log the layout line (INFO, shown by the CLI's logging) when sequence parallelism is on; return it."""
    line = sequence_parallel_layout(cfg)
    if line is not None:
        logger.info(line)
    return line


def _attention_heads(model_path: str | None, override: dict) -> int | None:
    """num_attention_heads of an HF model folder from its config.json (and model.override_config), without loading
    transformers; None when the folder or the field is not there (the attention then names the problem)."""
    import json
    import os

    if "num_attention_heads" in override:
        return int(override["num_attention_heads"])
    if not model_path:  # null: the bundled default model, measured when setup has prepared it
        from verl.utils.default_model import prepared_default_model_path

        model_path = prepared_default_model_path()
        if model_path is None:
            return None
    path = os.path.join(os.path.expanduser(model_path), "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            heads = json.load(f).get("num_attention_heads")
    except (OSError, ValueError):
        return None
    return int(heads) if isinstance(heads, int) else None


def check_sft_ulysses(cfg: Any, world: int) -> list[str]:
    """The SFT trainer's ulysses_sequence_parallel_size (top level, as upstream's sft_trainer.yaml). ``cfg``: an
    SFTTrainerConfig (not imported: sft.py calls this, and the config package has no import cycles)."""
    sp = cfg.ulysses_sequence_parallel_size
    if sp == 1:
        return []
    problems = []
    if world % sp:
        problems.append(f"ulysses_sequence_parallel_size={sp} must divide the {world} ranks (torchrun's "
                        "--nproc_per_node, or trainer.nnodes * trainer.n_gpus_per_node); data parallelism runs over "
                        "ranks / sp.")
    if not cfg.use_remove_padding:
        problems.append(f"ulysses_sequence_parallel_size={sp} splits packed sequences; set use_remove_padding=true.")
    heads = _attention_heads(cfg.model.partial_pretrain, cfg.model.override_config)
    if heads is not None and heads % sp:
        problems.append(f"ulysses_sequence_parallel_size={sp} must divide the model's {heads} attention heads "
                        f"(model.partial_pretrain={cfg.model.partial_pretrain or 'the default model'}): each rank attends over "
                        "heads / sp.")
    return problems
