"""FSDPCheckpointManager on 2 (and 1) gloo CPU ranks: exact resume, resharding, integrity errors naming the file,
and the merger turning the shards into a HF folder with the trained actor's log-probs."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from tests.checkpoint.fsdp_ckpt_runs import LR, WARMUP, eval_ids, run_all, token_log_probs
from verl.trainer.config import CheckpointConfig

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fsdp_ckpt"))
    return root, run_all(root)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("world", [2, 1])
def test_resume_repeats_the_next_step_bitwise(runs, world):
    _, results = runs
    for rank in range(world):
        r = results[(world, rank)]
        # RNG: the draw after loading is the draw that followed the save
        assert torch.equal(r["resumed_draw"], r["draw"]), rank
        # scheduler: 2 steps of a 3-step warmup from 0 -> lr = 2/3 LR for step 3
        assert r["resumed_lr"] == pytest.approx(LR * 2 / WARMUP)
        assert r["resumed_loss3"] == r["loss3"]
    first = results[(world, 0)]
    diff = _max_diff(first["resumed_full3"], first["full3"])
    print(f"world {world}: max |param diff| after the resumed step 3 = {diff}")
    assert diff == 0.0


def test_load_into_another_world_size_reshards(runs):
    _, results = runs
    reference, resharded = results[(2, 0)], results["resharded"]
    # one rank on both ranks' rows computes the same mean gradient as two ranks averaging theirs
    assert resharded["loss3"] == pytest.approx(reference["loss3"] / 2 + results[(2, 1)]["loss3"] / 2, rel=1e-5)
    assert _max_diff(resharded["full3"], reference["full3"]) < 1e-5


def test_layout_and_manifest(runs):
    root, _ = runs
    ckpt = os.path.join(root, "world2")
    names = set(os.listdir(ckpt))
    assert {"model", "optimizer", "huggingface", "manifest.json", "extra_state_world_size_2_rank_0.pt",
            "extra_state_world_size_2_rank_1.pt"} <= names
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= set(os.listdir(os.path.join(ckpt, "model")))
    manifest = json.load(open(os.path.join(ckpt, "manifest.json")))
    assert manifest["world_size"] == 2 and manifest["global_step"] == 2
    assert manifest["contents"] == ["model", "optimizer", "extra", "hf_model"]
    assert "model/__1_0.distcp" in manifest["files"] and "huggingface/config.json" in manifest["files"]
    config = json.load(open(os.path.join(ckpt, "huggingface", "config.json")))
    assert config["architectures"] == ["LlamaForCausalLM"]  # not FSDP's generated subclass


def _broken_copy(root: str, tmp_path, name: str) -> str:
    broken = str(tmp_path / name)
    shutil.copytree(os.path.join(root, "world2"), broken)
    return broken


def _load_single_process(path: str) -> None:
    from transformers import LlamaForCausalLM

    from tests.checkpoint.fsdp_ckpt_runs import manager
    from tests.helpers.tiny_model import tiny_llama_config

    model = LlamaForCausalLM(tiny_llama_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    manager(model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)).load(path)


def test_missing_shard_is_named(runs, tmp_path):
    from verl.checkpoint import CheckpointIntegrityError

    broken = _broken_copy(runs[0], tmp_path, "missing")
    os.remove(os.path.join(broken, "model", "__1_0.distcp"))
    with pytest.raises(CheckpointIntegrityError, match=r"model/__1_0\.distcp is missing"):
        _load_single_process(broken)


def test_corrupted_shard_is_named(runs, tmp_path):
    from verl.checkpoint import CheckpointIntegrityError

    broken = _broken_copy(runs[0], tmp_path, "flipped")
    shard = os.path.join(broken, "optimizer", "__0_0.distcp")
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF  # same size: only the hash can tell
    open(shard, "wb").write(bytes(data))
    with pytest.raises(CheckpointIntegrityError, match=r"optimizer/__0_0\.distcp is corrupted: its sha256"):
        _load_single_process(broken)


def test_truncated_extra_state_and_missing_manifest_are_named(runs, tmp_path):
    from verl.checkpoint import CheckpointIntegrityError

    broken = _broken_copy(runs[0], tmp_path, "truncated")
    extra = os.path.join(broken, "extra_state_world_size_2_rank_1.pt")
    os.truncate(extra, os.path.getsize(extra) // 2)
    with pytest.raises(CheckpointIntegrityError, match=r"extra_state_world_size_2_rank_1\.pt is corrupted: \d+ bytes"):
        _load_single_process(broken)
    os.remove(os.path.join(broken, "manifest.json"))
    with pytest.raises(CheckpointIntegrityError, match=r"truncated/manifest\.json is missing"):
        _load_single_process(broken)


@pytest.mark.parametrize("world", [2, 1])
def test_merged_model_has_the_actors_log_probs(runs, tmp_path, world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.model_merger.__main__ import main

    root, results = runs
    target = str(tmp_path / "hf")
    main(["merge", "--backend", "fsdp", "--local_dir", os.path.join(root, f"world{world}"), "--target_dir", target])
    assert os.path.isfile(os.path.join(target, "model.safetensors"))
    merged = AutoModelForCausalLM.from_pretrained(target)
    diff = (token_log_probs(merged, eval_ids()) - results[(world, 0)]["log_probs"]).abs().max().item()
    print(f"saved by {world} rank(s): max |log-prob diff| merged vs trained = {diff:.3g}")
    assert diff < 1e-5
    assert AutoTokenizer.from_pretrained(target).eos_token == "<|im_end|>"


def test_hf_model_content_and_merger_test_command(runs, capsys):
    from transformers import AutoModelForCausalLM

    from verl.model_merger.__main__ import main

    root, results = runs
    hf_dir = os.path.join(root, "world2", "huggingface")
    saved = AutoModelForCausalLM.from_pretrained(hf_dir)
    assert (token_log_probs(saved, eval_ids()) - results[(2, 0)]["log_probs"]).abs().max().item() < 1e-5
    main(["test", "--backend", "fsdp", "--local_dir", os.path.join(root, "world2"), "--test_hf_dir", hf_dir])
    assert "matches" in capsys.readouterr().out


def test_merger_names_a_missing_shard(runs, tmp_path, capsys):
    from verl.model_merger.__main__ import main

    broken = _broken_copy(runs[0], tmp_path, "merge_missing")
    os.remove(os.path.join(broken, "model", "__0_0.distcp"))
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", "--backend", "fsdp", "--local_dir", broken, "--target_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    assert "merge_missing/model/__0_0.distcp is missing" in capsys.readouterr().err


def test_critic_checkpoint_merges_to_a_token_classification_model(tmp_path):
    """A value model saved without a process group (one plain process) merges to a model with the same values."""
    from transformers import AutoModelForTokenClassification

    from tests.helpers.tiny_model import tiny_llama_config
    from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.model_merger.__main__ import main
    from verl.models.value_head import build_value_model

    torch.manual_seed(0)
    critic = build_value_model(tiny_llama_config(), score_init_std=0.5)
    optimizer = torch.optim.AdamW(critic.parameters(), lr=LR)
    FSDPCheckpointManager(critic, optimizer, None, None, CheckpointConfig(save_contents=["model", "optimizer"])).save(
        str(tmp_path / "critic"), global_step=1)
    main(["merge", "--backend", "fsdp", "--local_dir", str(tmp_path / "critic"), "--target_dir", str(tmp_path / "hf")])
    merged = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf")
    ids = eval_ids()
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, critic.eval()(input_ids=ids).logits, atol=1e-6)
