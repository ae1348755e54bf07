"""rollout.checkpoint_engine.update_weights_bucket_megabytes: the weight sync into the rollout engine goes in buckets
of at most that size. Counted on a module of equal parameters (hand-computed bucket counts), with a stand-in engine
that records what it is handed; the real vLLM sync: tests/workers/rollout/test_prometheus_metrics.py."""

from __future__ import annotations

import torch

from verl.workers.sharding_manager import fsdp_vllm
from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

KIB = 2**10
_GATHERED = fsdp_vllm._Gathered


class _Engine:
    """What the manager needs of a vLLM rollout; ``update_weights`` consumes the stream as vLLM's reload does and
    records, at every tensor handed over, the bytes of full tensors gathered but not yet handed over."""

    tied_embeddings = False
    model_hf_config = None

    def __init__(self, dtype: str, started: list[int]) -> None:
        self.engine_kwargs = {"dtype": dtype}
        self.started = started
        self.received: dict[str, torch.Tensor] = {}
        self.outstanding: list[int] = []

    def update_weights(self, stream) -> None:
        handed = 0
        for name, tensor in stream:
            handed += tensor.numel() * tensor.element_size()
            self.outstanding.append(sum(self.started) - handed)
            self.received[name] = tensor.clone()


def _module(big: bool = False) -> torch.nn.Module:
    """Ten 256x256 fp32 weights (256 KiB each, 128 KiB in bf16); ``big``: a 768x512 one (1.5 MiB) after them."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256, bias=False) for _ in range(10)]
    if big:
        layers.append(torch.nn.Linear(512, 768, bias=False))
    return torch.nn.Sequential(*layers)


def _sync(module, monkeypatch, dtype: str, bucket_megabytes: int | None) -> tuple[FSDPVLLMShardingManager, _Engine]:
    started: list[int] = []

    def counting(param, cast):
        started.append(param.numel() * torch.empty((), dtype=cast or param.dtype).element_size())
        return _GATHERED(param, cast)

    monkeypatch.setattr(fsdp_vllm, "_Gathered", counting)
    engine = _Engine(dtype, started)
    manager = FSDPVLLMShardingManager(module, engine, bucket_megabytes=bucket_megabytes)
    manager.sync_weights()
    return manager, engine


def test_bucket_size_sets_how_many_buckets_the_sync_sends(monkeypatch):
    module = _module()
    # 1 MiB holds four 256 KiB weights: 4 + 4 + 2
    manager, engine = _sync(module, monkeypatch, "float32", bucket_megabytes=1)
    assert manager.last_sync_buckets == [(4, 1024 * KIB), (4, 1024 * KIB), (2, 512 * KIB)]
    assert max(engine.outstanding) == 3 * 256 * KIB  # the rest of a bucket while its first tensor loads
    # upstream's default, 2048 MB: the whole (small) model is one bucket, every gather issued at once
    manager, engine = _sync(module, monkeypatch, "float32", bucket_megabytes=2048)
    assert manager.last_sync_buckets == [(10, 2560 * KIB)]
    assert max(engine.outstanding) == 9 * 256 * KIB
    # a bf16 engine halves each gathered weight: eight fit in 1 MiB
    manager, engine = _sync(module, monkeypatch, "bfloat16", bucket_megabytes=1)
    assert manager.last_sync_buckets == [(8, 1024 * KIB), (2, 256 * KIB)]
    assert all(t.dtype == torch.bfloat16 for t in engine.received.values())


def test_bucketing_changes_what_is_in_flight_not_what_arrives(monkeypatch):
    module = _module(big=True)
    _, one = _sync(module, monkeypatch, "float32", bucket_megabytes=2048)
    manager, many = _sync(module, monkeypatch, "float32", bucket_megabytes=1)
    # the 1.5 MiB weight exceeds the bucket: it goes alone, after 4 + 4 + 2
    assert manager.last_sync_buckets == [(4, 1024 * KIB), (4, 1024 * KIB), (2, 512 * KIB), (1, 1536 * KIB)]
    assert max(many.outstanding) < max(one.outstanding)
    assert list(many.received) == list(one.received) == [n for n, _ in module.named_parameters()]
    for name, param in module.named_parameters():
        assert torch.equal(many.received[name], param.detach()) and torch.equal(one.received[name], param.detach())


def test_without_a_bucket_two_gathers_run_ahead(monkeypatch):
    manager, engine = _sync(_module(), monkeypatch, "float32", bucket_megabytes=None)
    assert manager.last_sync_buckets == [(10, 2560 * KIB)]  # one stream, two gathers ahead of the engine
    assert max(engine.outstanding) == 2 * 256 * KIB


def _buckets_on_two_ranks(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from tests.helpers.tiny_model import tiny_llama
    from verl.workers.config import FSDPEngineConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.sharding_manager.fsdp_vllm import full_named_weights

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # odd sizes: rank 1's dim-0 shards are shorter (FSDP2 pads them); a 16 KiB bucket splits the model
        plain = tiny_llama(vocab_size=127, intermediate_size=63, num_key_value_heads=1)
        expected = {n: p.detach().clone() for n, p in plain.named_parameters(remove_duplicate=False)}
        module = apply_fsdp2(plain, FSDPEngineConfig(), create_device_mesh(2))
        buckets: list[tuple[int, int]] = []
        got = list(full_named_weights(module, None, tied_lm_head=True, bucket_bytes=16 * KIB, buckets=buckets))
        results[rank] = ([n for n, _ in got] == list(expected) and all(torch.equal(t, expected[n]) for n, t in got),
                         buckets)
    finally:
        dist.destroy_process_group()


def test_buckets_gather_fsdp2_shards_exactly_and_alike_on_two_ranks():
    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_buckets_on_two_ranks, free_port(), nprocs=2, timeout_s=100)
    (exact0, buckets0), (exact1, buckets1) = results[0], results[1]
    assert exact0 and exact1
    assert buckets0 == buckets1 and len(buckets0) > 1  # every rank issues the same gathers in the same buckets
    assert all(size <= 16 * KIB or count == 1 for count, size in buckets0)
