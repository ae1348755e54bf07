"""Building blocks for training an HF model under FSDP2 (`fully_shard`): mesh, wrapping, mixed precision,
optimizer and LR schedule. The same calls run on gloo/CPU and nccl/GPU; only `verl.utils.device` knows which.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from verl.utils.device import get_device_name, hardware_compute_dtype, has_fast_bf16
from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, OptimizerConfig
from verl.workers.config.optimizer import optimizer_class

logger = logging.getLogger(__name__)

# reshard_after_forward as apply_fsdp2 configured each unit, to restore it after a stretch that changes it
_RESHARD_AFTER_FORWARD: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()

_DTYPES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}


def to_torch_dtype(name: str | torch.dtype | None, key: str, default: torch.dtype = torch.float32) -> torch.dtype:
    if name is None:
        return default
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"{key}={name!r} is not a dtype; use one of {sorted(_DTYPES)}") from None


def create_device_mesh(world_size: int, fsdp_size: int = -1) -> DeviceMesh:
    """1-D mesh over all ranks (fsdp_size -1 or >= world size); HSDP (replicate x shard) when smaller."""
    device = get_device_name()
    if fsdp_size is None or fsdp_size < 0 or fsdp_size >= world_size:
        return init_device_mesh(device, (world_size,), mesh_dim_names=("fsdp",))
    if world_size % fsdp_size:
        raise ValueError(f"fsdp_config.fsdp_size={fsdp_size} must divide the world size {world_size}")
    return init_device_mesh(device, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def decoder_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of an HF model: one FSDP unit each, so only one block is unsharded at a time."""
    no_split = set(getattr(module, "_no_split_modules", None) or [])
    layers = [m for m in module.modules() if type(m).__name__ in no_split]
    if not layers:  # models that don't declare _no_split_modules: any ModuleList of identical blocks
        for child in module.modules():
            if isinstance(child, torch.nn.ModuleList) and len(child) > 1:
                layers = list(child)
                break
    return layers


def mixed_precision_policy(fsdp_config: FSDPEngineConfig, warn: bool = True) -> MixedPrecisionPolicy:
    """FSDP2's policy from an FSDPEngineConfig's `mixed_precision`; `warn` once per module (apply_fsdp2), not per lookup.

    `param_dtype: null` (unset) computes in the hardware's dtype (verl.utils.device.hardware_compute_dtype): the
    driver resolves it the same way before Ray and logs the choice, so a worker built directly (tests, SFT ranks)
    lands on the same dtype. The master weights stay in model_dtype and gradients reduce in reduce_dtype."""
    mp = fsdp_config.mixed_precision
    asked = mp.param_dtype if mp.param_dtype is not None else hardware_compute_dtype()[0]
    param_dtype = to_torch_dtype(asked, "fsdp_config.mixed_precision.param_dtype")
    if warn and param_dtype in (torch.bfloat16, torch.float16) and get_device_name() == "cpu" and not has_fast_bf16():
        logger.warning("fsdp_config.mixed_precision.param_dtype=%s on a CPU without native bf16 (no AVX512-BF16/AMX): "
                       "its matmuls are emulated, ~100x slower than fp32; set param_dtype=fp32 here", param_dtype)
    return MixedPrecisionPolicy(
        param_dtype=param_dtype,
        reduce_dtype=to_torch_dtype(mp.reduce_dtype, "fsdp_config.mixed_precision.reduce_dtype"),
        output_dtype=None,
        cast_forward_inputs=True,
    )


def apply_fsdp2(module: torch.nn.Module, fsdp_config: FSDPEngineConfig, mesh: DeviceMesh,
                offload_activations: bool = False) -> torch.nn.Module:
    """`fully_shard` every decoder layer, then the root (embeddings, final norm and a tied lm_head together).

    ``offload_activations`` (`model.enable_activation_offload`, the trained roles only): what the layers save for
    backward moves to host memory in the forward (verl.models.activation_offload), with the layers' gradient
    checkpointing as loaded.

    ``fsdp_config`` is an FSDPEngineConfig; its ``reshard_after_forward`` applies to the layers. The root keeps its parameters from forward to
    backward, FSDP2's own default for a root: the LM head is the first thing backward needs, so freeing it after
    forward would only re-gather it at once (passing the layers' value to the root would override that default).
    """
    kwargs = {"mesh": mesh, "mp_policy": mixed_precision_policy(fsdp_config)}
    if fsdp_config.param_offload or fsdp_config.optimizer_offload:
        if get_device_name() == "cpu":
            logger.warning("fsdp_config.param_offload/optimizer_offload have no effect on CPU: weights already live in host memory")
        else:
            from torch.distributed.fsdp import CPUOffloadPolicy

            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    layer_reshard = fsdp_config.reshard_after_forward
    # mesh None: fully_shard's default, every rank
    ranks = mesh.size() if mesh is not None else (dist.get_world_size() if dist.is_initialized() else 1)
    if ranks > 1:
        from verl.models.vision import enable_blank_image_forward

        enable_blank_image_forward(module)  # the vision blocks below become collectives: every rank must run them
    layers = decoder_layers(module)
    for layer in layers:
        fully_shard(layer, reshard_after_forward=layer_reshard, **kwargs)
        _RESHARD_AFTER_FORWARD[layer] = layer_reshard
    fully_shard(module, reshard_after_forward=False, **kwargs)
    _RESHARD_AFTER_FORWARD[module] = False
    _settle_root(module)
    if offload_activations:
        from verl.models.activation_offload import enable_activation_offload

        enable_activation_offload(layers)  # after the wrap: the hooks run after FSDP's parameter gathering
    return module


def _settle_root(module: FSDPModule) -> None:
    """Make ``module`` FSDP2's root now, as its first forward would.

    FSDP2 takes as root whichever unit runs forward first. HF ``generate`` on a peft model runs the wrapped
    model's forward, not the PeftModel's (the root unit), so the first decoder layer would crown itself root and
    the first training forward would fail ("FSDP requires running forward through the root module first"). The
    units are final here, which is all FSDP2's lazy initialisation needs (torch 2.11 and 2.13 alike)."""
    if isinstance(module, FSDPModule):
        module._get_fsdp_state()._lazy_init()


def fsdp_modules(module: torch.nn.Module) -> list[FSDPModule]:
    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def restore_reshard_settings(module: torch.nn.Module) -> None:
    """Put every FSDP unit back to its configured resharding (after a stretch that changed it): after forward as
    ``apply_fsdp2`` set it (units sharded elsewhere: every unit but the root), and after backward."""
    for unit in fsdp_modules(module):
        unit.set_reshard_after_forward(_RESHARD_AFTER_FORWARD.get(unit, unit is not module), recurse=False)
        unit.set_reshard_after_backward(True, recurse=False)


@contextmanager
def unsharded(module: torch.nn.Module) -> Iterator[None]:
    """Hold the full weights on every rank for a stretch of forwards (generation, log-probs of several
    micro-batches): one all-gather per FSDP unit instead of one per forward, and no collectives inside, so ranks
    may run different numbers of forwards."""
    units = fsdp_modules(module)
    if not units:
        yield
        return
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        restore_reshard_settings(module)


def drop_unreduced_gradients(module: torch.nn.Module) -> None:
    """Forget the gradients FSDP2 accumulated unsharded (not yet reduce-scattered) on every FSDP2 submodule."""
    for unit in fsdp_modules(module):
        for group in unit._get_fsdp_state()._fsdp_param_groups:  # no public API clears them (torch 2.13)
            for fsdp_param in group.fsdp_params:
                fsdp_param.unsharded_accumulated_grad = None
                unsharded_param = getattr(fsdp_param, "_unsharded_param", None)
                if unsharded_param is not None:
                    unsharded_param.grad = None


def build_optimizer(module: torch.nn.Module, optim: OptimizerConfig, key: str) -> torch.optim.Optimizer:
    """The section's optimizer over the module's trainable parameters; ``key`` names the section in errors.

    The class is ``optim.optimizer`` of the module ``optim.optimizer_impl`` (AdamW of torch.optim by default;
    an OptimizerConfig without those keys gets AdamW). It is given lr and weight_decay, betas when its name has
    "adam" in it (as upstream), torch's fused kernel for torch.optim's Adam/AdamW, then every entry of
    ``optim.override_optimizer_config``, which adds arguments or replaces those."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{key}: the model has no trainable parameters")
    cls = optimizer_class(optim) if isinstance(optim, FSDPOptimizerConfig) else torch.optim.AdamW
    kwargs: dict = {"lr": optim.lr, "weight_decay": optim.weight_decay}
    if "adam" in cls.__name__.lower():
        kwargs["betas"] = tuple(optim.betas)
    if cls in (torch.optim.AdamW, torch.optim.Adam):
        # The fused kernel (CPU and CUDA) is ~6x faster than the default per-tensor loop on DTensor shards here.
        fused = all(p.dtype in (torch.float32, torch.bfloat16, torch.float16) for p in params)
        kwargs["fused"] = fused or None
    kwargs.update(getattr(optim, "override_optimizer_config", None) or {})
    try:
        return cls(params, **kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{key}: {cls.__module__}.{cls.__name__}({', '.join(sorted(kwargs))}) failed: {e}; check "
                         f"{key}.optimizer / optimizer_impl / override_optimizer_config") from e


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim: FSDPOptimizerConfig, key: str) -> torch.optim.lr_scheduler.LRScheduler:
    """The FSDPOptimizerConfig's schedule: linear warmup (lr_warmup_steps, or lr_warmup_steps_ratio of
    total_training_steps when it is negative), then constant or cosine (lr_scheduler_type; the deprecated warmup_style is folded into it)."""
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    total = optim.total_training_steps
    warmup = optim.lr_warmup_steps
    if warmup < 0:
        warmup = int(math.floor(optim.lr_warmup_steps_ratio * max(total, 0)))
    style = optim.lr_scheduler_type
    if style == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup,
                                                 zero_indexed_step=optim.zero_indexed_step)
    if style == "cosine":
        if total <= 0:
            raise ValueError(f"{key}.lr_scheduler_type=cosine needs {key}.total_training_steps > 0 (the trainer sets it)")
        return get_cosine_schedule_with_warmup(
            optimizer, num_warmup_steps=warmup, num_training_steps=total,
            # upstream's yaml allows null here, meaning no floor
            min_lr_ratio=0.0 if optim.min_lr_ratio is None else optim.min_lr_ratio,
            num_cycles=optim.num_cycles, zero_indexed_step=optim.zero_indexed_step,
        )
    raise ValueError(f"{key}.lr_scheduler_type={style!r} is not implemented: use 'constant' or 'cosine'")


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1
