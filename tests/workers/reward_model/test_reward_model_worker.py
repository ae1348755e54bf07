"""RewardModelWorker on 1 and 2 gloo ranks with tiny random reward models, against plain HF scoring each row alone.

One spawn per world size runs every variant (the ranks build several workers on one process group):
fixed micro-batches of 1 and 4 rows, dynamic token budgets, packed (remove padding, also padded up to a length
bucket), a sequence-classification checkpoint, and the re-templating path (the reward model's chat template differs
from the policy's) with the dataset's messages and with messages recovered from the decoded prompt.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests.workers.reward_model.rm_fixtures import (
    OTHER_TEMPLATE,
    expected_rm_scores,
    make_batch,
    make_tiny_rm_dir,
    reference_scores,
)

TOL = 1e-4
EXTERNAL_LIB = "tests.workers.reward_model.rm_external_lib"
CUT = 24  # reward_model.max_length of one re-templating variant: shorter than every re-templated row

VARIANTS = {
    "micro1": ("token", {"micro_batch_size_per_gpu": 1, "model.external_lib": EXTERNAL_LIB}, True),
    "micro4": ("token", {"micro_batch_size_per_gpu": 4, "strategy": "fsdp2"}, True),
    "dynamic": ("token", {"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 130}, True),
    "global_micro": ("token", {"micro_batch_size": 2, "micro_batch_size_per_gpu": None}, True),
    "packed": ("token", {"model.use_remove_padding": True, "micro_batch_size_per_gpu": 3}, True),
    "packed_bucket": ("token", {"model.use_remove_padding": True, "micro_batch_size_per_gpu": 3,
                                "model.fsdp_config.pad_to_length": True, "model.fsdp_config.pad_to_length_bucket": 64},
                      True),
    "sequence_cls": ("sequence", {"micro_batch_size_per_gpu": 2, "model.trust_remote_code": True}, True),
    "retemplate_raw": ("other_template", {"micro_batch_size_per_gpu": 2}, True),
    "retemplate_decoded": ("other_template", {"use_dynamic_bsz": True, "forward_max_token_len_per_gpu": 80}, False),
    "retemplate_cut": ("other_template", {"max_length": CUT}, True),
}


def _config(rm_dir: str, input_tokenizer: str, extra: dict):
    from tests.helpers.typed_config import typed_section
    from verl.trainer.config.reward import RewardModelConfig

    # fp32 compute: the scores are compared with the plain fp32 HF model to 1e-4 (the default is the hardware's dtype)
    values = {"enable": True, "model.path": rm_dir, "model.input_tokenizer": input_tokenizer,
              "model.fsdp_config.mixed_precision.param_dtype": "fp32"}
    return typed_section(RewardModelConfig, values, **extra)


def _score_on_ranks(rank: int, world: int, port: int, dirs: dict, tokenizer_dir: str, results) -> None:
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import FSDPModule

    from verl.workers import reward_model_worker
    from verl.workers.reward_model_worker import RewardModelWorker

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    sections, trust = [], []
    real_apply = reward_model_worker.apply_fsdp2
    reward_model_worker.apply_fsdp2 = lambda module, fsdp, mesh: sections.append(fsdp) or real_apply(module, fsdp, mesh)
    real_load = transformers.AutoModelForTokenClassification.from_pretrained.__func__

    def spy_load(cls, *args, **kwargs):
        trust.append(kwargs.get("trust_remote_code"))
        return real_load(cls, *args, **kwargs)

    transformers.AutoModelForTokenClassification.from_pretrained = classmethod(spy_load)
    try:
        for name, (kind, extra, raw_chat) in VARIANTS.items():
            sections.clear(), trust.clear()
            config = _config(dirs[kind], tokenizer_dir, extra)
            worker = RewardModelWorker(config)
            worker.init_model()
            forwards = []
            real_forward = worker._forward
            worker._forward = lambda micro, _f=real_forward, _seen=forwards: _seen.append(len(micro)) or _f(micro)
            widths = []  # the sequence length of each forward (packed: the row's)
            worker.rm_module.get_input_embeddings().register_forward_pre_hook(
                lambda _m, args, _w=widths: _w.append(args[0].shape[-1]))
            batch = make_batch(raw_chat=raw_chat)
            shard = batch.chunk(world)[rank]  # what DP_COMPUTE_PROTO hands this rank
            out = worker.compute_rm_score(shard)
            results[(name, rank)] = {
                "rm_scores": out.batch["rm_scores"], "switch": worker.switches_template, "forwards": forwards,
                "fsdp2": all(isinstance(m, FSDPModule) for m in [worker.rm_module, *worker.rm_module.model.layers]),
                "own_fsdp_section": sections == [config.model.fsdp_config], "trust": list(trust),
                "attn": worker.rm_module.config._attn_implementation, "widths": widths,
                "external_lib_imported": EXTERNAL_LIB in sys.modules}
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def rm_dirs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("rm")
    return {"token": str(make_tiny_rm_dir(root / "token", "token")),
            "sequence": str(make_tiny_rm_dir(root / "sequence", "sequence", seed=1)),
            "other_template": str(make_tiny_rm_dir(root / "other", "token", chat_template=OTHER_TEMPLATE, seed=2))}


# two ranks run in the default suite (the data-parallel split and lockstep token budgets); one rank in the slow one
@pytest.fixture(scope="module", params=[pytest.param(1, marks=pytest.mark.slow), 2], ids=["1rank", "2ranks"])
def scored(request, rm_dirs) -> tuple[int, dict]:
    from tests.helpers.e2e import default_tokenizer_dir
    from tests.helpers.ranks import free_port, run_ranks

    world = request.param
    return world, run_ranks(_score_on_ranks, world, free_port(), rm_dirs, str(default_tokenizer_dir()), nprocs=world,
                            timeout_s=240)


def _gathered(results: dict, name: str, world: int) -> torch.Tensor:
    return torch.cat([results[(name, rank)]["rm_scores"] for rank in range(world)])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n in VARIANTS if not n.startswith("retemplate")])
def test_score_is_the_output_at_the_last_valid_token(scored, rm_dirs, name):
    world, results = scored
    kind = VARIANTS[name][0]
    batch = make_batch()
    want = expected_rm_scores(batch, reference_scores(Path(rm_dirs[kind]), batch))
    got = _gathered(results, name, world)
    assert got.shape == batch.batch["responses"].shape
    assert torch.allclose(got, want, atol=TOL), (got - want).abs().max()
    assert (got != 0).sum() == len(batch) - 1  # one score per row, the empty response's dropped
    assert results[(name, 0)]["switch"] is False  # same tokenizer and template: the ids are used as they are


@pytest.mark.timeout(300)
def test_micro_batch_dynamic_bsz_and_whole_batch_agree(scored):
    world, results = scored
    rows = 6 // world
    whole = _gathered(results, "micro4", world)  # 4 rows per rank hold each rank's whole shard (<= 6 rows)
    for name in ("micro1", "dynamic", "global_micro", "packed", "packed_bucket"):
        assert torch.allclose(_gathered(results, name, world), whole, atol=TOL), name
    # the keys decide the forwards: rows per micro-batch, the deprecated global size over the ranks, token budgets
    for rank in range(world):
        assert results[("micro1", rank)]["forwards"] == [1] * rows
        global_micro = [1] * rows if world == 2 else [2, 2, 2]  # micro_batch_size=2 over the ranks, per_gpu unused
        assert results[("global_micro", rank)]["forwards"] == global_micro
        dynamic = results[("dynamic", rank)]["forwards"]
        assert sum(dynamic) == rows and len(dynamic) >= 2  # 130-token budgets over rows of up to 60 tokens


@pytest.mark.timeout(300)
def test_model_keys_reach_the_worker(scored):
    world, results = scored
    for rank in range(world):
        for name in VARIANTS:
            entry = results[(name, rank)]
            assert entry["fsdp2"], name  # strategy fsdp and fsdp2: FSDP2 units on the root and every layer
            assert entry["own_fsdp_section"], name  # reward_model.model.fsdp_config goes to apply_fsdp2
        assert results[("sequence_cls", rank)]["trust"] == [True]
        assert results[("micro1", rank)]["trust"] == [False]
        assert results[("packed", rank)]["attn"] != results[("micro1", rank)]["attn"]  # varlen attention on
        # model.fsdp_config.pad_to_length: the packed rows reach the model padded up to multiples of the bucket
        assert any(n % 64 for n in results[("packed", rank)]["widths"])
        assert results[("packed_bucket", rank)]["widths"] == [-(-n // 64) * 64 for n in results[("packed", rank)]["widths"]]
        assert results[("micro1", rank)]["external_lib_imported"]  # model.external_lib, imported by the worker


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["retemplate_raw", "retemplate_decoded", "retemplate_cut"])
def test_retemplating_renders_the_chat_in_the_reward_models_template(scored, rm_dirs, name):
    world, results = scored
    batch = make_batch()
    cut = CUT if name == "retemplate_cut" else None
    want = expected_rm_scores(batch, reference_scores(Path(rm_dirs["other_template"]), batch, retemplate=True,
                                                      max_length=cut))
    plain = expected_rm_scores(batch, reference_scores(Path(rm_dirs["other_template"]), batch))
    got = _gathered(results, name, world)
    assert results[(name, 0)]["switch"] is True
    assert torch.allclose(got, want, atol=TOL), (got - want).abs().max()
    assert not torch.allclose(got, plain, atol=TOL)  # the policy's ids would have scored otherwise
