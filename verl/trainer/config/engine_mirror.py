"""The `fsdp_config` keys that repeat a role key (upstream's FSDPEngineConfig fields, issue 33): one setting each.

Upstream's engine section carries `ulysses_sequence_parallel_size`, `entropy_from_logits_with_chunking`,
`entropy_from_logits_chunk_size`, `use_torch_compile`, `entropy_checkpointing`, `pad_to_length` and `forward_only`
beside the role keys of the same names (its engine-based workers read the engine's, its legacy workers the role's).
Here the two are one setting:

- both equal: nothing to do;
- only the `fsdp_config` one changed (the role key at its default): it applies, copied onto the role key;
- only the role key changed (the engine key at its default, or following the role through the yaml, as
  `use_torch_compile` does in the actor and reference sections): copied onto the engine key, so both read the same;
- both changed to different values: refused, naming both.

`forward_only` says whether the role trains: the reference (and the reward model) run forward passes only whatever
it says, true or upstream's default false (upstream's workers set it true themselves when they build the
reference's engine; here the reference worker never builds an optimizer); the actor and the critic train, so true
is refused for them.
The critic computes no entropy, so its entropy keys are refused when true; it compiles nothing, so its
`use_torch_compile` (upstream's default true) is accepted either way with a note when changed.
"""

from __future__ import annotations

from typing import Any

from verl.workers.config.engine import FSDPEngineConfig

ARR = "actor_rollout_ref"
MIRRORED = ("ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size",
            "use_torch_compile", "entropy_checkpointing", "pad_to_length")
_ENTROPY_KEYS = ("entropy_from_logits_with_chunking", "entropy_from_logits_chunk_size", "entropy_checkpointing")
# the reference's yaml makes these follow the actor's (ref.yaml / dp_ref.yaml)
REF_FOLLOWS_ACTOR = ("ulysses_sequence_parallel_size", "use_torch_compile", "pad_to_length")
_ENGINE_DEFAULTS = {name: FSDPEngineConfig.__dataclass_fields__[name].default for name in MIRRORED}


def _shown(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _role_default(role: Any, name: str) -> Any:
    return type(role).__dataclass_fields__[name].default


def _set(obj: Any, name: str, value: Any) -> None:
    # written once on the driver while the typed config is being settled, before any worker sees it
    object.__setattr__(obj, name, value)


def mirror_one(role: Any, engine: Any, prefix: str, engine_prefix: str, name: str, writes: dict[str, Any],
               problems: list[str]) -> None:
    """Make `role.name` and `engine.name` one setting (the rules in the module docstring)."""
    ours, theirs = getattr(role, name), getattr(engine, name)
    if ours == theirs:
        return
    if ours == _role_default(role, name):
        _set(role, name, theirs)
        writes[f"{prefix}.{name}"] = theirs
    elif theirs == _ENGINE_DEFAULTS[name]:
        _set(engine, name, ours)
        writes[f"{engine_prefix}.{name}"] = ours
    else:
        problems.append(f"{engine_prefix}.{name}={theirs} and {prefix}.{name}={ours} are the same setting "
                        f"(upstream's engine key and its role key); give one, or the same value to both.")


def apply_engine_mirrors(cfg: Any, writes: dict[str, Any], problems: list[str], note) -> None:
    """Settle the mirrored fsdp_config keys of the actor, the reference and (when used) the critic, in place."""
    arr = cfg.actor_rollout_ref
    check_reward_model_engine(cfg, problems, note)
    before = {name: getattr(arr.actor, name) for name in REF_FOLLOWS_ACTOR}
    for name in MIRRORED:
        mirror_one(arr.actor, arr.actor.fsdp_config, f"{ARR}.actor", f"{ARR}.actor.fsdp_config", name, writes,
                   problems)
    for name, old in before.items():  # the yaml's ${..actor.<name>} in ref, resolved before the actor's moved
        new = getattr(arr.actor, name)
        if new != old and getattr(arr.ref, name) == old:
            _set(arr.ref, name, new)
            if getattr(arr.ref.fsdp_config, name) == old:
                _set(arr.ref.fsdp_config, name, new)
    for name in MIRRORED:
        mirror_one(arr.ref, arr.ref.fsdp_config, f"{ARR}.ref", f"{ARR}.ref.fsdp_config", name, writes, problems)
    if arr.actor.fsdp_config.forward_only:
        problems.append(f"{ARR}.actor.fsdp_config.forward_only=true: the actor trains (update_actor needs a backward "
                        "pass); set it false, or leave it out. The reference policy is the forward-only role.")
    if not cfg.use_critic:
        return
    critic, engine, key = cfg.critic, cfg.critic.model.fsdp_config, "critic.model.fsdp_config"
    mirror_one(critic, engine, "critic", key, "ulysses_sequence_parallel_size", writes, problems)
    if engine.forward_only:
        problems.append(f"{key}.forward_only=true: the critic trains (update_critic needs a backward pass); set it "
                        "false, or leave it out.")
    for name in _ENTROPY_KEYS:
        if getattr(engine, name) != _ENGINE_DEFAULTS[name]:
            problems.append(f"{key}.{name}={_shown(getattr(engine, name))}: the critic computes values, never an "
                            "entropy, so there is nothing for it to change; remove it (the actor's key of the same "
                            "name is the one that acts).")
    if engine.use_torch_compile != _ENGINE_DEFAULTS["use_torch_compile"]:
        note(f"{key}.use_torch_compile={engine.use_torch_compile}: the critic has no compiled function (only the "
             "actor's entropy is compiled, by actor_rollout_ref.actor.use_torch_compile), so it changes nothing.")


def check_reward_model_engine(cfg: Any, problems: list[str], note) -> None:
    """The reward model's fsdp_config carries the same engine keys (one engine file): a forward-only scorer with no
    Ulysses and no entropy, so changed values are refused; use_torch_compile is noted (nothing is compiled)."""
    if not cfg.reward_model.enable:
        return
    engine, key = cfg.reward_model.model.fsdp_config, "reward_model.model.fsdp_config"
    if engine.ulysses_sequence_parallel_size != 1:
        problems.append(f"{key}.ulysses_sequence_parallel_size={engine.ulysses_sequence_parallel_size}: the reward "
                        "model scores without sequence parallelism here; set it to 1.")
    for name in _ENTROPY_KEYS:
        if getattr(engine, name) != _ENGINE_DEFAULTS[name]:
            problems.append(f"{key}.{name}={_shown(getattr(engine, name))}: the reward model computes scores, never an "
                            "entropy; remove it.")
    if engine.use_torch_compile != _ENGINE_DEFAULTS["use_torch_compile"]:
        note(f"{key}.use_torch_compile={engine.use_torch_compile}: the reward model has no compiled function, so it "
             "changes nothing.")
