"""`model.enable_activation_offload`: what a decoder layer saves for backward lives in host memory until backward.

Upstream verl groups the saved tensors by decoder layer and moves every group but the last layer's to (pinned) host
memory during the forward, bringing each back when backward reaches that layer. This module does the same with
torch's saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``), entered around each layer's forward
while the model trains:

- pack: a tensor on an accelerator that is not one of the layer's parameters is copied into pinned host memory
  (``non_blocking``, on the compute stream, so the order of the copies needs no extra synchronisation); the device
  tensor is kept only until the layer's forward ends, so the device holds about one layer's activations at a time.
  A tensor saved by several ops (the normalised input read by q, k and v) is copied once.
- unpack: the host copy goes back to the tensor's device once, shared by every op that saved it.

With gradient checkpointing the hooks sit outside the checkpoint, as upstream's do: what a checkpointed layer
keeps (its input, and under the selective torch mode the outputs that mode keeps on the device) is saved by the
checkpoint itself, and the input is what moves to host memory. Our selective-recompute functions
(verl.models.selective_recompute) are plain autograd functions, so with them every tensor the layer keeps moves.

Host tensors are left where they are (there is no other memory to move them to): on a CPU the feature runs, sees
every saved tensor and changes nothing, and the gradients are those of the model without it
(tests/models/test_activation_offload.py moves host tensors too, through ``offload_device_types``, to show that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["LayerOffload", "enable_activation_offload", "activation_offload_enabled"]

_ATTR = "_verl_activation_offload"


@dataclass
class _HostCopy:
    device: torch.device
    host: torch.Tensor
    reloaded: torch.Tensor | None = None


@dataclass
class LayerOffload:
    """The saved-tensor hooks of one decoder layer: enter before its forward, exit after it.

    ``offload_device_types``: the devices whose tensors move to host memory (None: every device but the CPU).
    ``packed`` / ``moved`` count the tensors seen and the tensors copied, for tests and logs."""

    layer: torch.nn.Module
    offload_device_types: tuple[str, ...] | None = None
    packed: int = 0
    moved: int = 0
    _hooks: torch.autograd.graph.saved_tensors_hooks | None = None
    _copies: dict = field(default_factory=dict)  # one layer's forward: (storage, offset, shape, stride, dtype) -> copy
    _alive: list = field(default_factory=list)  # the device tensors copied in this forward, freed at its end
    _params: set | None = None

    def active(self) -> bool:
        return self._hooks is not None

    def enter(self) -> None:
        if self._hooks is not None:  # a nested call of the same layer: the outer context covers it
            return
        self._copies, self._alive, self._params = {}, [], None
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()

    def exit(self) -> None:
        if self._hooks is None:
            return
        hooks, self._hooks = self._hooks, None
        hooks.__exit__(None, None, None)
        # the host copies are queued on the compute stream; the allocator reuses these blocks only for later work
        self._copies, self._alive, self._params = {}, [], None

    def _moves(self, tensor: torch.Tensor) -> bool:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.is_sparse:
            return False  # tensor subclasses (DTensor, fake tensors under compile) stay as they are
        kind = tensor.device.type
        wanted = kind != "cpu" if self.offload_device_types is None else kind in self.offload_device_types
        if not wanted or isinstance(tensor, torch.nn.Parameter):
            return False
        if self._params is None:  # inside the forward FSDP has gathered the layer's parameters: these storages
            self._params = {p.untyped_storage().data_ptr() for p in self.layer.parameters()
                            if type(p) in (torch.Tensor, torch.nn.Parameter)}
        return tensor.untyped_storage().data_ptr() not in self._params

    def _pack(self, tensor: torch.Tensor):
        self.packed += 1
        if not self._moves(tensor):
            return tensor
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
               tensor.dtype)
        copy = self._copies.get(key)
        if copy is None:
            pin = tensor.device.type != "cpu" and torch.cuda.is_available()
            host = torch.empty_like(tensor, device="cpu", pin_memory=pin)
            host.copy_(tensor, non_blocking=pin)
            copy = self._copies[key] = _HostCopy(tensor.device, host)
            self._alive.append(tensor)  # keeps the address from being reused by another tensor of this forward
            self.moved += 1
        return copy


def _unpack(saved):
    if isinstance(saved, torch.Tensor):
        return saved
    if saved.reloaded is None:
        saved.reloaded = saved.host.to(saved.device, non_blocking=saved.host.is_pinned())
    return saved.reloaded


def _wants_hooks(module: torch.nn.Module) -> bool:
    return module.training and torch.is_grad_enabled()


def _checkpointing(layer: torch.nn.Module) -> bool:
    """Whether HF checkpoints this layer itself (transformers' GradientCheckpointingLayer)."""
    return bool(getattr(layer, "gradient_checkpointing", False)) and hasattr(layer, "_gradient_checkpointing_func")


def _wrap_checkpoint(layer: torch.nn.Module, offload: LayerOffload) -> None:
    """Enter the hooks around the checkpoint call, so what the checkpoint saves (the layer input) moves."""
    inner = layer._gradient_checkpointing_func

    def offloaded_checkpoint(function, *args, **kwargs):
        if not _wants_hooks(layer) or offload.active():
            return inner(function, *args, **kwargs)
        offload.enter()
        try:
            return inner(function, *args, **kwargs)
        finally:
            offload.exit()

    offloaded_checkpoint.inner = inner
    layer._gradient_checkpointing_func = offloaded_checkpoint


def _add_forward_hooks(layer: torch.nn.Module, offload: LayerOffload) -> list:
    def before(module, args):
        if _wants_hooks(module):
            offload.enter()

    def after(module, args, output):
        offload.exit()

    # after FSDP's own pre-forward hook, so the layer's parameters are gathered when the first tensor is packed
    return [layer.register_forward_pre_hook(before), layer.register_forward_hook(after, always_call=True)]


def enable_activation_offload(layers: list[torch.nn.Module],
                              offload_device_types: tuple[str, ...] | None = None) -> list[LayerOffload]:
    """Offload what ``layers`` (a model's decoder layers, in forward order) save for backward, all but the last,
    whose activations backward needs first. Call it after gradient checkpointing is set and after FSDP wraps the
    layers; calling it again replaces the earlier hooks. Returns the hooks of each offloaded layer."""
    disable_activation_offload(layers)
    offloads = []
    for layer in layers[:-1]:
        offload = LayerOffload(layer, offload_device_types)
        handles = [] if _checkpointing(layer) else _add_forward_hooks(layer, offload)
        if not handles:
            _wrap_checkpoint(layer, offload)
        setattr(layer, _ATTR, (offload, handles))
        offloads.append(offload)
    return offloads


def disable_activation_offload(layers: list[torch.nn.Module]) -> None:
    for layer in layers:
        state = layer.__dict__.pop(_ATTR, None)
        if state is None:
            continue
        offload, handles = state
        offload.exit()
        for handle in handles:
            handle.remove()
        inner = getattr(getattr(layer, "_gradient_checkpointing_func", None), "inner", None)
        if inner is not None:
            layer._gradient_checkpointing_func = inner


def activation_offload_enabled(module: torch.nn.Module) -> bool:
    return any(_ATTR in m.__dict__ for m in module.modules())
