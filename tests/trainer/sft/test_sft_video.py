"""SFT on video-text conversations (upstream's video rows: <video> placeholders, a data.video_key column) with tiny
random Qwen2-VL / Qwen2.5-VL folders: video tokens expanded and never trained, positions equal the model's own, the
loss equal to plain HF's in the padded and packed paths, bad videos refused by row and column."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.tiny_video import save_tiny_video_vlm_dir, write_mp4
from tests.helpers.tiny_vlm import tiny_vlm
from tests.trainer.sft.test_sft_vlm import image, multiturn_config, write
from verl.data.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.data.sft_dataset import SFTDataset
from verl.data.sft_vision import MULTI_MODAL_INPUTS, collate_sft_batch
from verl.data.video import VideoError
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.trainer.config.sft import SFTDataConfig
from verl.trainer.sft.loss import count_trained_tokens, sft_nll_sum


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def vlm(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    folder = save_tiny_video_vlm_dir(root / "model", request.param)
    tokenizer = load_tokenizer(folder, "model.partial_pretrain")
    clip = write_mp4(root / "clip.mp4", frames=10, fps=4.0)
    return request.param, clip, tokenizer, load_processor(folder, tokenizer, "model.partial_pretrain")


def conversations(clip: str) -> list[dict]:
    """A video row, a row with an image and (in a later turn) a video, a text row."""
    return [
        {"messages": [{"role": "user", "content": "<video>What moves?"},
                      {"role": "assistant", "content": "A bar."}],
         "images": [], "videos": [{"video": clip}]},
        {"messages": [{"role": "user", "content": "<image>Is it red?"}, {"role": "assistant", "content": "Yes."},
                      {"role": "user", "content": "And <video> here?"}, {"role": "assistant", "content": "No."}],
         "images": [image((16, 16), (255, 0, 0))], "videos": [{"video": clip, "nframes": 6}]},
        {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}],
         "images": [], "videos": []},
    ]


def dataset(vlm, tmp_path, rows=None) -> MultiTurnSFTDataset:
    _, clip, tokenizer, processor = vlm
    path = write(tmp_path / "videos.parquet", rows if rows is not None else conversations(clip))
    return MultiTurnSFTDataset(path, tokenizer, multiturn_config(max_length=128), processor=processor)


def test_items_expand_videos_and_train_only_assistant_text(vlm, tmp_path):
    family, clip, tokenizer, processor = vlm
    data = dataset(vlm, tmp_path)
    item = data[1]
    # the row's 6 frames of 16x24: t = 3, 4x6 patches merged 2x2: 18 video tokens; the 16x16 image: 4 tokens
    assert item["video_grid_thw"].tolist() == [[3, 4, 6]] and item["image_grid_thw"].tolist() == [[1, 4, 4]]
    real = item["attention_mask"].bool()
    assert int((item["input_ids"][real] == processor.video_token_id).sum()) == 18
    targets = item["input_ids"][1:][item["loss_mask"][:-1].bool()]
    assert tokenizer.decode(targets) == "Yes.<|im_end|>\nNo.<|im_end|>\n"
    # the (4, L) positions' mrope rows are the model's own get_rope_index
    ids = item["input_ids"][real][None]
    types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
    extra = {"second_per_grid_ts": item["second_per_grid_ts"]} if family == "qwen2_5_vl" else {}
    expected, _ = tiny_vlm(family).model.get_rope_index(ids, mm_token_type_ids=types,
                                                        image_grid_thw=item["image_grid_thw"],
                                                        video_grid_thw=item["video_grid_thw"], **extra)
    assert torch.equal(item["position_ids"][1:, real], expected[:, 0])
    # single-turn rows in the RL format with a response column
    rows = [{"prompt": [{"role": "user", "content": "<video>Count."}], "response": "\\boxed{2}",
             "videos": [{"video": clip}]}]
    single = SFTDataset(write(tmp_path / "single.parquet", rows), tokenizer, SFTDataConfig(max_length=96),
                        processor=processor)[0]
    assert single["video_grid_thw"].tolist() == [[2, 4, 6]]


def hf_nll(model, batch, processor) -> tuple[torch.Tensor, int]:
    total, count = torch.zeros(()), 0
    for row in range(batch["input_ids"].size(0)):
        real = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row][real][None]
        inputs = batch[MULTI_MODAL_INPUTS][row]
        types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
        model.model.rope_deltas = None
        logits = model(input_ids=ids, mm_token_type_ids=types, use_cache=False, **inputs).logits[0]
        trained = batch["loss_mask"][row][real][:-1].bool()
        nll = F.cross_entropy(logits[:-1][trained].float(), ids[0, 1:][trained], reduction="sum")
        total, count = total + nll, count + int(trained.sum())
    return total, count


def test_loss_with_videos_equals_plain_hf_padded_and_packed(vlm, tmp_path):
    family, _, _, processor = vlm
    data = dataset(vlm, tmp_path)
    batch = collate_sft_batch([data[i] for i in range(3)])
    assert [sorted(row) for row in batch[MULTI_MODAL_INPUTS]][2] == []
    model = tiny_vlm(family)
    with torch.no_grad():
        expected, count = hf_nll(model, batch, processor)
    assert count == count_trained_tokens(batch)
    for packed in (False, True):
        module = copy.deepcopy(model)
        nll, tokens = sft_nll_sum(module, batch, packed)
        torch.testing.assert_close(nll / tokens, expected / count, rtol=1e-5, atol=1e-5)
        nll.backward()
        assert any(p.grad is not None and float(p.grad.abs().sum()) > 0
                   for name, p in module.named_parameters() if ".visual." in f".{name}")


def test_bad_videos_and_placeholder_counts_are_refused_by_row(vlm, tmp_path):
    _, clip, _, _ = vlm
    rows = conversations(clip)
    rows[0]["videos"] = [{"video": str(tmp_path / "missing.mp4")}]
    with pytest.raises(VideoError, match=r"row 0 column 'videos' \(data.video_key\) video 0: video file .* does not"):
        dataset(vlm, tmp_path, rows)
    rows = conversations(clip)
    rows[1]["videos"] = []
    with pytest.raises(ValueError, match=r"row 1: the messages hold 1 <video> placeholders but column 'videos'"):
        dataset(vlm, tmp_path, rows)


@pytest.mark.timeout(300)
def test_ulysses_with_videos_equals_one_process(vlm, tmp_path):
    """ulysses_sequence_parallel_size=2: the group's NLL sum, token count and gradients equal one packed pass."""
    from tests.helpers.ranks import free_port, run_ranks
    from tests.trainer.sft.test_sft_vlm import _sp_rank

    family = vlm[0]
    data = dataset(vlm, tmp_path)
    batch = collate_sft_batch([data[i] for i in range(3)])
    model = tiny_vlm(family).train()
    nll, count = sft_nll_sum(model, batch, True)
    nll.backward()
    want = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    out = run_ranks(_sp_rank, free_port(), family, batch, nprocs=2, timeout_s=280)
    for rank in (0, 1):
        got = out[rank]
        assert got["count"] == int(count) and got["nll"] == pytest.approx(float(nll.detach()), rel=1e-5)
        assert got["grads"].keys() == want.keys()
        for name, grad in got["grads"].items():
            torch.testing.assert_close(grad, want[name], rtol=1e-4, atol=1e-5)
