"""Upstream v0.7 keys on a GPU: model.tiled_mlp (outputs and gradients of the tiled MLP equal the untiled model's,
fp32 and bf16), profiler tool_config.torch.contents (``cuda`` puts CUDA kernels in the trace, ``cpu`` leaves them
out), fsdp_config.full_determinism (torch's deterministic mode, cuBLAS's workspace setting, bit-identical gradients
from the same seed) and rollout.logprobs_mode=processed_logprobs under top_k in the hf rollout. The CPU tests of the
same features: tests/models/test_tiled_mlp.py, tests/utils/test_profiler_torch_contents.py,
tests/workers/test_engine_seed_keys.py, tests/workers/rollout/test_rollout_v07_keys.py.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py). The helpers take the device, so
their logic runs on CPU as well."""

from __future__ import annotations

import copy
import gzip
import json
import os

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.helpers.determinism import restored_determinism
from verl.models.tiled_mlp import apply_tiled_mlp
from verl.utils.determinism import enable_full_determinism

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

DETERMINISM_ENV = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "NCCL_DETERMINISTIC", "FLASH_ATTENTION_DETERMINISTIC")


# ---------------------------------------------------------------- model.tiled_mlp


def tiny_qwen2(seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cuda",
               attention_dropout: float = 0.0) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attention_dropout=attention_dropout)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(dtype=dtype, device=device)


def loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    logits.float().pow(2).mean().backward()
    return logits.detach().float(), {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over max |want|: the error on the tensor's own scale."""
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def tiled_vs_untiled(dtype: torch.dtype, device: str, num_shards: int = 4) -> tuple[float, dict[str, float]]:
    """The worst relative error of the tiled model's logits and of each parameter's gradient against the untiled."""
    plain = tiny_qwen2(dtype=dtype, device=device)
    tiled = copy.deepcopy(plain)
    assert apply_tiled_mlp(tiled, num_shards) == 2  # one MLP per decoder layer
    ids = torch.randint(0, 128, (2, 64), generator=torch.Generator().manual_seed(1)).to(device)
    logits, grads = loss_and_grads(plain, ids)
    t_logits, t_grads = loss_and_grads(tiled, ids)
    assert t_grads.keys() == grads.keys()
    assert all(g.abs().max() > 0 for g in grads.values())  # every parameter really gets a gradient
    return rel_err(t_logits, logits), {n: rel_err(t_grads[n], grads[n]) for n in grads}


@pytest.mark.parametrize(("dtype", "logits_tol", "grad_tol"), [
    # fp32 (TF32 is off by default): the slices' matmuls and the order of the weight-gradient sums differ only
    (torch.float32, 1e-5, 1e-5),
    # bf16: each slice's matmul output (cuBLAS may pick another kernel for fewer rows) and each slice's weight
    # gradient are rounded to bf16 (8 mantissa bits: a relative step of 2**-8 ~ 4e-3), and the 4 slice gradients
    # are summed in bf16 (three more roundings; ~7e-3 of the tensor's scale measured on CPU): a few roundings, not
    # a loss of accuracy
    (torch.bfloat16, 2e-2, 3e-2),
])
def test_tiled_mlp_matches_the_untiled_model_on_cuda(dtype, logits_tol, grad_tol):
    logits_err, grad_errs = tiled_vs_untiled(dtype, "cuda")
    assert logits_err <= logits_tol, (dtype, logits_err)
    worst = max(grad_errs, key=grad_errs.get)
    assert grad_errs[worst] <= grad_tol, (dtype, worst, grad_errs[worst])


# ---------------------------------------------------------------- profiler tool_config.torch.contents


def trace_events(tmp_path, contents: list[str], device: str) -> list[dict]:
    """One profiled step of the CPU profiler tests' worker stand-in with its model on ``device``; the trace's events."""
    from tests.utils.test_profiler_torch import _Worker
    from verl.utils.profiler import ProfilerConfig, ProfilerToolConfig, TorchProfilerToolConfig
    from verl.utils.profiler.torch_profile import trace_path

    tools = ProfilerToolConfig(torch=TorchProfilerToolConfig(contents=contents))
    worker = _Worker("actor_rollout", ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path),
                                                     tool_config=tools))
    worker.model.to(device)  # in place: the optimizer keeps the same parameters
    x = torch.randn(4, 8, device=device)
    worker.profiler.start(profile_step=1)
    worker.generate_sequences(x)
    worker.update_actor(x)
    if device == "cuda":
        torch.cuda.synchronize()
    worker.profiler.stop()
    with gzip.open(trace_path(str(tmp_path), 1, "actor_rollout", 0), "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.mark.parametrize(("contents", "kernels", "cpu_ops"), [
    ([], True, True),  # neither named: both, cuda because there is a GPU
    (["cuda"], True, None),  # whether CPU-side records appear with the CUDA activity alone is torch's business
    (["cpu"], False, True),
    (["cpu", "cuda"], True, True),
])
def test_contents_cuda_records_the_kernels_and_cpu_alone_does_not(tmp_path, contents, kernels, cpu_ops):
    events = trace_events(tmp_path, contents, "cuda")
    # kineto names the category "kernel" (older releases: "Kernel")
    assert any(str(e.get("cat")).lower() == "kernel" for e in events) is kernels, contents
    if cpu_ops is not None:
        assert any(e.get("cat") == "cpu_op" and str(e.get("name")).startswith("aten::") for e in events) is cpu_ops


# ---------------------------------------------------------------- fsdp_config.full_determinism


@pytest.fixture
def restore_determinism():
    with restored_determinism(DETERMINISM_ENV):
        yield


def seeded_grads(seed: int, device: str) -> dict[str, torch.Tensor]:
    """full_determinism's seeding, then one training forward and backward (attention dropout on: the device's
    generator matters; repeated token ids: the embedding gradient accumulates into the same rows)."""
    enable_full_determinism(seed)
    model = tiny_qwen2(seed=seed, device=device, attention_dropout=0.1)
    model.train()
    ids = torch.randint(0, 16, (4, 48), device=device)  # from the generator just seeded
    return loss_and_grads(model, ids)[1]


def test_full_determinism_on_cuda(restore_determinism):
    torch.use_deterministic_algorithms(False)
    first = seeded_grads(7, "cuda")
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"  # as verl.utils.determinism and upstream set it
    second = seeded_grads(7, "cuda")
    assert first.keys() == second.keys()
    for name in first:
        assert first[name].device.type == "cuda"
        assert torch.equal(first[name], second[name]), name  # bit-identical, not merely close
    other = seeded_grads(8, "cuda")
    assert any(not torch.equal(first[n], other[n]) for n in first)  # the seed really decides the run


# ---------------------------------------------------------------- rollout.logprobs_mode (hf rollout)


def processed_vs_by_hand(device: str, temperature: float = 2.0, top_k: int = 5):
    """The hf rollout's processed_logprobs of what it sampled, the model's own truncated renormalised log-softmax of
    the same tokens (logits / T, all but the top k set to -inf), and the raw log-softmax; with the response mask."""
    from tests.helpers.tiny_model import EOS_ID, tiny_llama
    from tests.workers.rollout.test_hf_rollout import PROMPT_LEN, prompts, rollout_config
    from verl.workers.rollout import HFRollout

    model = tiny_llama().to(device)
    rollout = HFRollout(model, rollout_config(temperature=temperature, top_k=top_k, calculate_log_probs=True,
                                              logprobs_mode="processed_logprobs", enforce_eager=True))
    torch.manual_seed(3)
    out = rollout.generate_sequences(prompts(eos=[EOS_ID, 7, 9], do_sample=True))
    b = out.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"].to(device), attention_mask=b["attention_mask"].to(device),
                       position_ids=b["position_ids"].to(device)).logits.float()[:, PROMPT_LEN - 1 : -1].cpu()
    responses = b["responses"].unsqueeze(-1)
    raw = torch.log_softmax(logits, -1).gather(-1, responses).squeeze(-1)
    scaled = logits / temperature
    kth = scaled.topk(top_k, dim=-1).values[..., -1:]
    truncated = scaled.masked_fill(scaled < kth, float("-inf"))
    processed = torch.log_softmax(truncated, -1).gather(-1, responses).squeeze(-1)
    return b["rollout_log_probs"], processed, raw, b["response_mask"].bool()


def test_hf_rollout_processed_logprobs_under_top_k_on_cuda():
    got, processed, raw, mask = processed_vs_by_hand("cuda")
    assert mask.sum() > 4
    # decoding with a KV cache vs one full forward: fp32 kernels that differ in the last bits only
    assert torch.allclose(got[mask], processed[mask], atol=2e-4), (got[mask] - processed[mask]).abs().max()
    assert not torch.allclose(got[mask], raw[mask], atol=1e-2)  # processed really differs from raw here
    assert torch.isfinite(got[mask]).all()  # a sampled token is always inside the top k
    assert (got[~mask] == 0).all()
