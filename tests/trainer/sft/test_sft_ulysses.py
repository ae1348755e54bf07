"""Ulysses sequence parallelism in the SFT trainer (`ulysses_sequence_parallel_size` at the top level).

On 2 gloo ranks the trainer with sp=2 (one SP group, dp=1: both ranks read the whole batch and split each packed
micro-batch) gives the loss, gradients, grad norm and validation loss of sp=1 (dp=2: each rank reads half),
with gradient checkpointing on, grouped-query attention, micro-batches of single samples of unequal (odd) length,
so rows are padded to a multiple of sp. The same holds on 4 ranks (sp=2 x dp=2 against dp=4) and for a LoRA
adapter. The config refusals are checked without starting any rank.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.trainer.sft.sft_helpers import compose_sft
from verl.trainer.sft.config import validate_sft_config
from verl.utils.config_errors import ConfigError

PACKED = ["use_remove_padding=true", "model.enable_gradient_checkpointing=true", "trainer.resume_mode=disable"]


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory) -> str:
    """The tiny Llama with 4 query heads and 1 kv head (fewer kv heads than SP ranks: they are repeated)."""
    folder = tmp_path_factory.mktemp("tiny_gqa")
    tokenizer = build_tiny_tokenizer()
    model = tiny_llama(seed=5, vocab_size=len(tokenizer), num_key_value_heads=1, initializer_range=0.2,
                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                       bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _full_grads(module) -> dict[str, torch.Tensor]:
    # full_tensor() is collective: every rank calls it for every parameter in the same order
    return {name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
            for name, p in module.named_parameters() if p.grad is not None}


def _rank(rank: int, world: int, extra: tuple, model_dir: str, files, out: str, port: int, results) -> None:
    import torch.distributed as dist

    from verl.trainer.sft.trainer import create_trainer

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    report = {}
    try:
        for sp in (1, 2):
            # sp=1: all of a rank's rows (batch 4 over the world) in one micro-batch; sp=2: single samples
            micro = 4 // world if sp == 1 else 1
            composed = compose_sft(model_dir, files, Path(out) / f"sp{sp}", *PACKED, *extra,
                                   f"ulysses_sequence_parallel_size={sp}", f"data.micro_batch_size_per_gpu={micro}")
            trainer = create_trainer(validate_sft_config(composed, world_size=world))
            grads: dict[str, torch.Tensor] = {}
            trainer.optimizer.step = lambda grads=grads, module=trainer.fsdp_model: grads.update(_full_grads(module))
            batch = next(iter(trainer.train_dataloader))
            metrics = trainer.training_step(batch)
            report[sp] = {"loss": metrics["train/loss"], "grad_norm": metrics["train/grad_norm"],
                          "tokens": metrics["train/tokens"], "val": trainer.validate()["val/loss"],
                          "grads": grads, "dp": trainer.dp_size, "rows": len(batch["input_ids"]),
                          "lengths": batch["attention_mask"].sum(-1).tolist()}
        want, got = report[1].pop("grads"), report[2].pop("grads")
        # tensors stay in the rank (the manager would ship them through shared-memory handles): diffs only
        report["grad_keys_match"] = bool(want) and want.keys() == got.keys()
        report["only_lora_grads"] = all("lora_" in k for k in want)
        report["grad_excess"] = max((got[k] - w).abs().max().item() - 1e-4 * w.abs().max().item() for k, w in want.items())
        results[rank] = report
    finally:
        dist.destroy_process_group()


def _sp2_against_sp1(world: int, extra: tuple, model_dir: str, files, tmp_path) -> dict:
    results = run_ranks(_rank, world, extra, model_dir, files, str(tmp_path), free_port(), nprocs=world,
                        timeout_s=180)
    sp1, sp2 = results[0][1], results[0][2]
    # sp=2: world / 2 groups, each reading batch / groups samples on both its ranks
    assert (sp1["dp"], sp1["rows"], sp2["dp"], sp2["rows"]) == (world, 4 // world, world // 2, 8 // world)
    assert results[1][2]["lengths"] == sp2["lengths"]  # rank 1 is in rank 0's SP group: the same samples
    assert sp2["tokens"] == sp1["tokens"] > 0
    assert sp2["loss"] == pytest.approx(sp1["loss"], abs=1e-5)
    assert sp2["val"] == pytest.approx(sp1["val"], abs=1e-5)
    assert sp2["grad_norm"] == pytest.approx(sp1["grad_norm"], rel=1e-4)
    # every parameter's gradient: |sp2 - sp1| <= 1e-5 + 1e-4 * max |sp1|
    assert results[0]["grad_keys_match"] and results[0]["grad_excess"] <= 1e-5, results[0]["grad_excess"]
    return results


@pytest.mark.timeout(200)
def test_sp2_matches_sp1_in_loss_and_gradients(gqa_model_dir, arithmetic_sft_files, tmp_path):
    sp2 = _sp2_against_sp1(2, (), gqa_model_dir, arithmetic_sft_files, tmp_path)[0][2]
    assert len(set(sp2["lengths"])) > 1 and any(n % 2 for n in sp2["lengths"]), sp2["lengths"]


@pytest.mark.timeout(300)
def test_sp2_with_dp2_on_four_ranks_matches_dp4(gqa_model_dir, arithmetic_sft_files, tmp_path):
    results = _sp2_against_sp1(4, (), gqa_model_dir, arithmetic_sft_files, tmp_path)
    assert results[2][2]["lengths"] == results[3][2]["lengths"] != results[0][2]["lengths"]  # the second group


@pytest.mark.timeout(200)
def test_sp2_matches_sp1_for_a_lora_adapter(gqa_model_dir, arithmetic_sft_files, tmp_path):
    results = _sp2_against_sp1(2, ("model.lora_rank=4", "model.lora_alpha=8"), gqa_model_dir, arithmetic_sft_files,
                               tmp_path)
    assert results[0]["only_lora_grads"]  # the adapter trains, the base weights are frozen


# ---- refused before any rank starts ---------------------------------------------------------------------------


def _validate(world: int, **keys):
    return validate_sft_config(keys, world_size=world, check_files=False)


def test_sp_is_accepted_with_remove_padding_and_divides_the_batch_by_dp(tiny_model_dir):
    # a 4-head model: the default one (9 heads) would refuse sp=2
    typed = _validate(4, ulysses_sequence_parallel_size=2, model={"partial_pretrain": tiny_model_dir},
                      data={"train_batch_size": 4, "micro_batch_size_per_gpu": 2})
    assert typed.ulysses_sequence_parallel_size == 2
    # dp = 4 / 2 = 2: 4 samples / 2 = 2 per group; with sp=1 the same batch over 4 ranks is 1 per rank, refused
    with pytest.raises(ConfigError, match="data.train_batch_size / ranks = 1 must be divisible"):
        _validate(4, data={"train_batch_size": 4, "micro_batch_size_per_gpu": 2})


def test_invalid_sp_combinations_are_refused():
    with pytest.raises(ConfigError) as err:
        _validate(3, ulysses_sequence_parallel_size=2, use_remove_padding=False)
    text = str(err.value)
    assert "ulysses_sequence_parallel_size=2 must divide the 3 ranks" in text
    assert "set use_remove_padding=true" in text
    # 4 ranks / sp 2 = 2 data-parallel groups
    with pytest.raises(ConfigError, match=r"data.train_batch_size=3 must be divisible by the 2 data-parallel ranks"):
        _validate(4, ulysses_sequence_parallel_size=2, data={"train_batch_size": 3, "micro_batch_size_per_gpu": 1})


def test_sp_not_dividing_the_heads_is_refused(tiny_model_dir):
    # the tiny model has 4 attention heads
    with pytest.raises(ConfigError, match="must divide the model's 4 attention heads"):
        _validate(3, ulysses_sequence_parallel_size=3, model={"partial_pretrain": tiny_model_dir},
                  data={"train_batch_size": 3, "micro_batch_size_per_gpu": 1})
    _validate(4, ulysses_sequence_parallel_size=4, model={"partial_pretrain": tiny_model_dir},
              data={"train_batch_size": 4, "micro_batch_size_per_gpu": 1})


# ---- a whole run ------------------------------------------------------------------------------------------------


def _losses(report_dir: Path) -> dict[int, float]:
    import json

    with open(report_dir / "metrics.jsonl") as f:
        return {row["step"]: row["train/loss"] for row in map(json.loads, f) if "train/loss" in row}


@pytest.mark.e2e
@pytest.mark.slow  # ~24 s; the 2-rank loss/gradient equivalence above runs in the default suite
@pytest.mark.timeout(120)
def test_two_rank_sp2_run_matches_one_rank_and_resumes_on_one(gqa_model_dir, arithmetic_sft_files, tmp_path):
    """`torchrun --nproc_per_node=2 ... ulysses_sequence_parallel_size=2` trains as one plain rank: the same loss
    at every step; its mid-run checkpoint resumes on one rank (sp=1) and continues with the same losses."""
    import os
    import sys

    from tests.trainer.sft.test_sft_multirank import launch

    steps = ["trainer.total_training_steps=4", "trainer.save_freq=2", "use_remove_padding=true",
             "model.fsdp_config.mixed_precision.param_dtype=fp32"]
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node=2"]
    for name in ("one", "sp2", "resumed"):
        (tmp_path / name).mkdir()
    launch([sys.executable], gqa_model_dir, arithmetic_sft_files, tmp_path / "one", *steps)
    launch(torchrun, gqa_model_dir, arithmetic_sft_files, tmp_path / "sp2", *steps, "ulysses_sequence_parallel_size=2")
    one, sp2 = _losses(tmp_path / "one" / "report"), _losses(tmp_path / "sp2" / "report")
    assert sorted(one) == sorted(sp2) == [1, 2, 3, 4]
    for step in one:
        assert sp2[step] == pytest.approx(one[step], abs=1e-5), (step, one, sp2)
    assert one[4] < one[1]  # it did train
    # step 2 of 4 is mid-epoch: the data position saved by the one data-parallel group carries over to one rank
    os.symlink(tmp_path / "sp2" / "global_step_2", tmp_path / "resumed" / "global_step_2")
    launch([sys.executable], gqa_model_dir, arithmetic_sft_files, tmp_path / "resumed", *steps)
    resumed = _losses(tmp_path / "resumed" / "report")
    assert sorted(resumed) == [3, 4]
    for step in resumed:
        assert resumed[step] == pytest.approx(one[step], abs=1e-5), (step, one, resumed)


def test_the_default_models_heads_are_checked_when_partial_pretrain_is_null():
    from verl.utils.default_model import prepared_default_model_path

    if prepared_default_model_path() is None:
        pytest.skip("the default model is not prepared (make setup prepares it)")
    with pytest.raises(ConfigError, match="must divide the model's 9 attention heads"):
        validate_sft_config({"ulysses_sequence_parallel_size": 2, "use_remove_padding": True}, world_size=2,
                            check_files=False)
