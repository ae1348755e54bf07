"""SFT on image-text conversations (the RL image rows' format) with tiny random Qwen2-VL / Qwen2.5-VL folders:
the items (vision tokens expanded, never trained; (4, L) mrope positions), the loss against plain HF in the padded
and packed paths, gradients into the vision tower, bad images refused by row and column, and a few steps through
`python -m verl.trainer.fsdp_sft_trainer` that lower the loss on a repeated batch."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F

from tests.helpers.tiny_vlm import png, save_tiny_vlm_dir, tiny_vlm
from tests.trainer.sft.sft_helpers import ROOT
from verl.data.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.data.sft_dataset import SFTDataset
from verl.data.sft_vision import MULTI_MODAL_INPUTS, VisionSampleTooLongError, collate_sft_batch
from verl.data.vision import ImageError
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.trainer.config.sft import SFTDataConfig, SFTMultiTurnConfig
from verl.trainer.sft.loss import count_trained_tokens, sft_nll_sum


def image(size, color):
    return {"bytes": png(size, color), "path": None}


def conversations() -> list[dict]:
    """Rows with 1, 2 (over two turns), 0 and 1 images of different sizes; the second has two assistant turns."""
    return [
        {"messages": [{"role": "user", "content": "<image>What colour is it?"},
                      {"role": "assistant", "content": "Red."}],
         "images": [image((16, 16), (255, 0, 0))]},
        {"messages": [{"role": "user", "content": "<image>Compare with"},
                      {"role": "assistant", "content": "Go on."},
                      {"role": "user", "content": "this <image> one."},
                      {"role": "assistant", "content": "They differ."}],
         "images": [image((8, 24), (0, 0, 255)), image((24, 16), (0, 200, 0))]},
        {"messages": [{"role": "user", "content": "No picture here."},
                      {"role": "assistant", "content": "Fine."}],
         "images": []},
        {"messages": [{"role": "user", "content": "Look: <image> now answer."},
                      {"role": "assistant", "content": "A square."}],
         "images": [image((32, 8), (90, 90, 0))]},
    ]


def write(path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen2_vl"])
def vlm(request, tmp_path_factory):
    folder = save_tiny_vlm_dir(tmp_path_factory.mktemp(request.param), request.param)
    tokenizer = load_tokenizer(folder, "model.partial_pretrain")
    return request.param, folder, tokenizer, load_processor(folder, tokenizer, "model.partial_pretrain")


def multiturn_config(**data) -> SFTDataConfig:
    return SFTDataConfig(**{"max_length": 96, "multiturn": SFTMultiTurnConfig(enable=True), **data})


def multiturn_dataset(vlm, tmp_path, rows=None, **data) -> MultiTurnSFTDataset:
    _, _, tokenizer, processor = vlm
    path = write(tmp_path / "conversations.parquet", rows if rows is not None else conversations())
    return MultiTurnSFTDataset(path, tokenizer, multiturn_config(**data), processor=processor)


def test_items_expand_images_and_train_only_assistant_text(vlm, tmp_path):
    _, _, tokenizer, processor = vlm
    dataset = multiturn_dataset(vlm, tmp_path)
    merge, image_id = processor.image_processor.merge_size, processor.image_token_id
    for row, source in enumerate(conversations()):
        item = dataset[row]
        real = item["attention_mask"].bool()
        ids = item["input_ids"][real]
        grid = item.get("image_grid_thw", torch.zeros(0, 3, dtype=torch.long))
        assert grid.shape[0] == len(source["images"])
        # every image expanded into t*h*w / merge^2 tokens, and the pixel rows match the grids
        assert int((ids == image_id).sum()) == int((grid.prod(-1) // merge**2).sum())
        if len(source["images"]):
            assert item["pixel_values"].shape[0] == int(grid.prod(-1).sum())
        assert item["position_ids"].shape == (4, 96)
        # the trained targets are exactly the assistant turns' text and end-of-turn tokens, never an image token
        targets = item["input_ids"][1:][item["loss_mask"][:-1].bool()]
        assert not (targets == image_id).any()
        answers = [m["content"] for m in source["messages"] if m["role"] == "assistant"]
        assert tokenizer.decode(targets) == "".join(f"{a}<|im_end|>\n" for a in answers)
    # text rows' mrope rows are their text positions; image tokens sit on a grid (rows 1-3 differ)
    plain = dataset[2]
    n = int(plain["attention_mask"].sum())
    assert all(torch.equal(plain["position_ids"][axis, :n], torch.arange(n)) for axis in range(4))
    first = dataset[0]["position_ids"]
    assert not torch.equal(first[2], first[3]) and int(first[1:].max()) < int(first[0].max())


def test_single_turn_rows_in_the_rl_format(vlm, tmp_path):
    """SFTDataset: an RL row (prompt messages with <image>, an images column) plus a response column."""
    _, _, tokenizer, processor = vlm
    rows = [{"prompt": [{"role": "user", "content": "<image>How many shapes?"}], "response": "\\boxed{3}",
             "images": [image((16, 16), (0, 0, 0))]},
            {"prompt": [{"role": "user", "content": "Say hi."}], "response": "hi", "images": []}]
    dataset = SFTDataset(write(tmp_path / "single.parquet", rows), tokenizer, SFTDataConfig(max_length=64),
                         processor=processor)
    item = dataset[0]
    assert item["image_grid_thw"].shape == (1, 3) and item["position_ids"].shape == (4, 64)
    targets = item["input_ids"][1:][item["loss_mask"][:-1].bool()]
    assert tokenizer.decode(targets) == "\\boxed{3}" + tokenizer.eos_token
    assert "pixel_values" not in dataset[1]


def test_collation_keeps_each_rows_images(vlm, tmp_path):
    dataset = multiturn_dataset(vlm, tmp_path)
    items = [dataset[i] for i in range(4)]
    batch = collate_sft_batch(items)
    assert batch["input_ids"].shape == (4, 96) and batch["position_ids"].shape == (4, 4, 96)
    per_row = batch[MULTI_MODAL_INPUTS]
    assert [len(row.get("image_grid_thw", [])) for row in per_row] == [1, 2, 0, 1]
    for row, item in zip(per_row, items):
        if "pixel_values" in item:
            assert torch.equal(row["pixel_values"], item["pixel_values"])
    assert MULTI_MODAL_INPUTS not in collate_sft_batch([items[2]])  # a text-only batch stays plain tensors


def hf_nll(model, batch, image_token_id) -> tuple[torch.Tensor, int]:
    """Plain HF, by hand: one unpadded row at a time with its own pixel values, the model computing its rope
    positions itself; NLL of every target the loss mask trains."""
    total, count = torch.zeros(()), 0
    for row in range(batch["input_ids"].size(0)):
        real = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row][real][None]
        inputs = batch[MULTI_MODAL_INPUTS][row] if MULTI_MODAL_INPUTS in batch else {}
        model.model.rope_deltas = None
        logits = model(input_ids=ids, mm_token_type_ids=(ids == image_token_id).int(), use_cache=False,
                       **inputs).logits[0]
        trained = batch["loss_mask"][row][real][:-1].bool()
        nll = F.cross_entropy(logits[:-1][trained].float(), ids[0, 1:][trained], reduction="sum")
        total, count = total + nll, count + int(trained.sum())
    return total, count


def test_loss_equals_plain_hf_padded_and_packed_and_reaches_the_vision_tower(vlm, tmp_path):
    family = vlm[0]
    batch = collate_sft_batch([multiturn_dataset(vlm, tmp_path)[i] for i in range(4)])
    model = tiny_vlm(family)  # the weights save_tiny_vlm_dir wrote
    with torch.no_grad():
        expected, count = hf_nll(model, batch, model.config.image_token_id)
    assert count == count_trained_tokens(batch)
    for packed in (False, True):
        module = copy.deepcopy(model)
        nll, tokens = sft_nll_sum(module, batch, packed)
        assert int(tokens) == count
        torch.testing.assert_close(nll / tokens, expected / count, rtol=1e-5, atol=1e-5)
        nll.backward()
        vision = [p.grad for name, p in module.named_parameters() if ".visual." in f".{name}"]
        assert vision and all(g is not None for g in vision)
        assert sum(float(g.abs().sum()) for g in vision) > 0
    # the pixels matter: blank images give another loss
    blank = dict(batch, **{MULTI_MODAL_INPUTS: [{k: torch.zeros_like(v) if k == "pixel_values" else v
                                                  for k, v in row.items()} for row in batch[MULTI_MODAL_INPUTS]]})
    with torch.no_grad():
        other, _ = sft_nll_sum(copy.deepcopy(model), blank, True)
    assert abs(float(other - expected)) > 1e-4


def test_text_rows_on_a_vlm_pack_without_crossing_samples(vlm, tmp_path):
    """A file without an image column on a VLM folder: text items, (bs, L) positions; packed, the model still
    gets positions from which HF separates the samples, so the loss equals plain HF's per row."""
    rows = [{"messages": row["messages"]} for row in conversations()]
    batch = collate_sft_batch([multiturn_dataset(vlm, tmp_path, rows)[i] for i in range(4)])
    assert batch["position_ids"].dim() == 2 and MULTI_MODAL_INPUTS not in batch
    model = tiny_vlm(vlm[0])
    with torch.no_grad():
        expected, count = hf_nll(model, batch, model.config.image_token_id)
        for packed in (False, True):
            nll, tokens = sft_nll_sum(model, batch, packed)
            torch.testing.assert_close(nll / tokens, expected / count, rtol=1e-5, atol=1e-5)


def test_bad_image_data_is_refused_naming_row_and_column(vlm, tmp_path):
    rows = conversations()
    rows[2]["images"] = [{"bytes": b"not a png", "path": None}]
    rows[2]["messages"][0]["content"] = "<image>" + rows[2]["messages"][0]["content"]
    with pytest.raises(ImageError, match=r"row 2 column 'images' \(data.image_key\) image 0: not a readable image"):
        multiturn_dataset(vlm, tmp_path, rows)
    rows = conversations()
    rows[3]["images"] = [{"bytes": None, "path": str(tmp_path / "missing.png")}]
    with pytest.raises(ImageError, match=r"row 3 column 'images' \(data.image_key\) image 0: image file .* does not"):
        multiturn_dataset(vlm, tmp_path, rows)
    rows = conversations()
    rows[1]["images"] = rows[1]["images"][:1]
    with pytest.raises(ValueError, match=r"row 1: the messages hold 2 <image> placeholders but column 'images'"):
        multiturn_dataset(vlm, tmp_path, rows)


def test_image_key_names_the_column_and_text_models_are_refused(vlm, tmp_path):
    rows = [{**row, "pictures": row.pop("images")} for row in conversations()]
    dataset = multiturn_dataset(vlm, tmp_path, rows, image_key="pictures")
    assert dataset[0]["image_grid_thw"].shape == (1, 3)
    # a data.video_key column is read (videos: tests/trainer/sft/test_sft_video.py); empty lists add nothing
    item = multiturn_dataset(vlm, tmp_path, [{**row, "videos": []} for row in conversations()])[0]
    assert "video_grid_thw" not in item
    _, _, tokenizer, _ = vlm
    path = write(tmp_path / "text_model.parquet", conversations())
    with pytest.raises(NotImplementedError, match=r"column 'images' \(data.image_key\) holds images, but the model"):
        MultiTurnSFTDataset(path, tokenizer, multiturn_config(), processor=None)


def _sp_rank(rank: int, port: int, family: str, batch, results) -> None:
    """Both ranks of one SP group take the same micro-batch and their own slice of its packed row."""
    import torch.distributed as dist

    from verl.utils.ulysses import create_ulysses_group

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        from verl.models.varlen_attention import enable_varlen_attention

        group = create_ulysses_group(2, "sft")
        model = tiny_vlm(family).train()
        enable_varlen_attention(model, sequence_parallel=True)  # as the trainer does with Ulysses
        nll, count = sft_nll_sum(model, batch, True, ulysses_group=group)
        nll.backward()
        total = torch.stack([nll.detach(), count.float()])
        dist.all_reduce(total)  # the group's share sums to the whole row's
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        for grad in grads.values():
            dist.all_reduce(grad)
        results[rank] = {"nll": float(total[0]), "count": int(total[1]), "grads": grads}
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])  # Qwen3-VL: its deepstack rows sliced per rank
def test_ulysses_with_images_equals_one_process(tmp_path, family):
    """ulysses_sequence_parallel_size=2 with images: the group's NLL sum, token count and gradients (vision tower
    included) equal one process's packed pass over the same micro-batch (with the varlen attention the trainer
    enables for Ulysses; a sample's answer in one rank attends to its images in the other)."""
    from tests.helpers.ranks import free_port, run_ranks

    folder = save_tiny_vlm_dir(tmp_path / family, family)
    tokenizer = load_tokenizer(folder, "model.partial_pretrain")
    vlm = (family, folder, tokenizer, load_processor(folder, tokenizer, "model.partial_pretrain"))
    batch = collate_sft_batch([multiturn_dataset(vlm, tmp_path)[i] for i in range(4)])
    model = tiny_vlm(family).train()
    nll, count = sft_nll_sum(model, batch, True)
    nll.backward()
    want = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    out = run_ranks(_sp_rank, free_port(), family, batch, nprocs=2, timeout_s=280)
    for rank in (0, 1):
        got = out[rank]
        assert got["count"] == int(count)
        assert got["nll"] == pytest.approx(float(nll), rel=1e-5)
        assert got["grads"].keys() == want.keys()
        vision = [n for n in want if ".visual." in f".{n}"]
        assert vision and sum(float(got["grads"][n].abs().sum()) for n in vision) > 0
        for name, grad in got["grads"].items():
            torch.testing.assert_close(grad, want[name], rtol=1e-4, atol=1e-5)


def test_truncation_never_cuts_an_image(vlm, tmp_path):
    rows = conversations()[:1]
    full = int(multiturn_dataset(vlm, tmp_path, rows)[0]["attention_mask"].sum())
    with pytest.raises(VisionSampleTooLongError, match="data.max_length"):
        multiturn_dataset(vlm, tmp_path, rows, max_length=full - 2)[0]
    # four tokens precede the first image token ("<|im_start|>", "user", "\n", "<|vision_start|>"): a left cut of
    # 4 keeps the image, a cut of 5 would not
    left = multiturn_dataset(vlm, tmp_path, rows, max_length=full - 4, truncation="left")[0]
    assert left["image_grid_thw"].shape == (1, 3) and int(left["position_ids"][0, 0]) == 0
    with pytest.raises(VisionSampleTooLongError, match="would cut through an image"):
        multiturn_dataset(vlm, tmp_path, rows, max_length=full - 5, truncation="left")[0]
    right = multiturn_dataset(vlm, tmp_path, rows, max_length=full - 2, truncation="right")[0]
    assert int(right["attention_mask"].sum()) == full - 2 and right["image_grid_thw"].shape == (1, 3)


def run_cli(folder, train, out, *overrides, launcher=()) -> subprocess.CompletedProcess:
    """`python [launcher] -m verl.trainer.fsdp_sft_trainer ...` on the conversations (multi-turn), fp32."""
    args = [sys.executable, *launcher, "-m", "verl.trainer.fsdp_sft_trainer", f"model.partial_pretrain={folder}",
            f"data.train_files={train}", "data.val_files=null", "data.multiturn.enable=true", "data.max_length=96",
            "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2", "optim.lr=5e-3",
            "optim.warmup_steps_ratio=0", "optim.lr_scheduler=constant",
            "model.fsdp_config.mixed_precision.param_dtype=fp32",
            f"trainer.default_local_dir={out}", "trainer.logger=[console]", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # left by in-process SFT tests
        env.pop(key, None)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def metrics(out) -> list[dict]:
    with open(out / "report" / "metrics.jsonl") as f:
        return list(map(json.loads, f))


def checkpoint_loss(folder: str, train: str) -> float:
    """The token-mean loss of the saved folder, loaded as main_ppo loads a model (with its own processor), on
    the training rows, by hand."""
    from verl.models.loader import load_causal_lm
    from verl.workers.config import HFModelConfig

    tokenizer = load_tokenizer(folder, "model.path")
    processor = load_processor(folder, tokenizer, "model.path")
    assert processor is not None  # the checkpoint is a vision-language folder again
    dataset = MultiTurnSFTDataset(train, tokenizer, multiturn_config(), processor=processor)
    model, _ = load_causal_lm(HFModelConfig(path=folder, enable_gradient_checkpointing=False), "model")
    with torch.no_grad():
        total, count = hf_nll(model.eval(), collate_sft_batch([dataset[i] for i in range(len(dataset))]),
                              processor.image_token_id)
    return float(total) / count


@pytest.mark.e2e
@pytest.mark.parametrize("overrides", [["use_remove_padding=true"],
                                       pytest.param(["use_remove_padding=false"], marks=pytest.mark.slow),
                                       pytest.param(["model.lora_rank=8", "model.lora_alpha=16"],
                                                    marks=pytest.mark.slow)],
                         ids=["packed", "padded", "lora"])
def test_sft_steps_through_the_cli_lower_the_loss_on_image_rows(tmp_path, overrides):
    """Four image rows (one without an image), one batch per step: the same batch every step. The checkpoint
    (LoRA: merged weights) reproduces the last validation loss as a plain HF vision-language folder."""
    folder = save_tiny_vlm_dir(tmp_path / "model", "qwen2_5_vl")
    train = write(tmp_path / "train.parquet", conversations())
    out = tmp_path / "run"
    result = run_cli(folder, train, out, *overrides, f"data.val_files={train}", "trainer.total_training_steps=6")
    assert result.returncode == 0, result.stderr[-4000:]
    rows = metrics(out)
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert len(losses) == 6 and all(b < a for a, b in zip(losses, losses[1:])), losses
    val = [row["val/loss"] for row in rows if "val/loss" in row][-1]
    assert checkpoint_loss(str(out / "global_step_6"), train) == pytest.approx(val, rel=1e-4)


@pytest.mark.e2e
@pytest.mark.slow
def test_two_torchrun_ranks_match_one_with_a_micro_batch_without_images(tmp_path):
    """One row has no image, so with one row per micro-batch some rank runs a micro-batch without images while
    its peer runs the (FSDP-sharded, so collective) vision tower: the ranks must neither hang nor change the loss."""
    folder = save_tiny_vlm_dir(tmp_path / "model", "qwen2_5_vl")
    train = write(tmp_path / "train.parquet", conversations())
    common = ("data.micro_batch_size_per_gpu=1", "trainer.total_training_steps=2", "trainer.save_freq=-1")
    one = run_cli(folder, train, tmp_path / "one", *common)
    assert one.returncode == 0, one.stderr[-4000:]
    two = run_cli(folder, train, tmp_path / "two", *common,
                  launcher=["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"])
    assert two.returncode == 0, two.stderr[-4000:]

    def losses(run):
        return [row["train/loss"] for row in metrics(tmp_path / run) if "train/loss" in row]

    assert losses("two") == pytest.approx(losses("one"), rel=1e-4)
