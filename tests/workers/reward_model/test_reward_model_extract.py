"""The text a generative judge reads from a rollout batch: verl.workers.reward_model_inputs.reward_texts, and
upstream's RewardModelWorker._extract_inputs_for_reward on a worker built from a config with a tiny reward model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.protocol import DataProto
from verl.workers.reward_model_inputs import reward_texts

PROMPT_LEN = 6


def _objects(values: list) -> np.ndarray:
    column = np.empty(len(values), dtype=object)  # one python object per row, as the dataset's collate makes it
    for i, value in enumerate(values):
        column[i] = value
    return column


def _batch(tokenizer, chats: list, responses: list[str], ground_truths: list, pad_id: int, width: int = 12,
           with_mask: bool = True) -> DataProto:
    ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(responses), PROMPT_LEN + width), dtype=torch.long)
    mask[:, :PROMPT_LEN] = 1
    for row, text in enumerate(responses):
        encoded = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        ids[row, : len(encoded)] = torch.tensor(encoded)
        mask[row, PROMPT_LEN : PROMPT_LEN + len(encoded)] = 1
    tensors = {"responses": ids, "attention_mask": mask} if with_mask else {"responses": ids}
    return DataProto.from_dict(tensors=tensors, non_tensors={
        "raw_prompt": _objects(chats), "reward_model": _objects([{"ground_truth": g} for g in ground_truths])})


CHATS = [
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 1 and 1."},
     {"role": "assistant", "content": "2"}, {"role": "user", "content": "Now add 7 and 8."}],
    [{"role": "system", "content": "No user turn here."}],
]


def test_questions_answers_and_ground_truths_per_row():
    tokenizer = build_tiny_tokenizer()
    batch = _batch(tokenizer, CHATS, ["5", "It is 15.", ""], ["5", 15, ["a", "b"]], tokenizer.pad_token_id)
    questions, answers, ground_truths = reward_texts(batch, tokenizer)
    assert questions == ["What is 2 + 3?", "Now add 7 and 8.", ""]  # the last user turn; none: empty
    assert answers == ["5", "It is 15.", ""]  # special tokens (EOS, pads) left out
    assert ground_truths == ["5", 15, ["a", "b"]]  # as the dataset stored them


def test_a_pad_id_that_is_a_plain_token_is_cut_by_the_attention_mask():
    tokenizer = build_tiny_tokenizer()
    plain = tokenizer.encode("7", add_special_tokens=False)[0]
    batch = _batch(tokenizer, CHATS[:2], ["5", "It is 15."], ["5", "15"], plain)
    assert reward_texts(batch, tokenizer)[1] == ["5", "It is 15."]
    # without a mask every column is the response: the plain pads are decoded with it
    unmasked = _batch(tokenizer, CHATS[:1], ["5"], ["5"], plain, width=4, with_mask=False)
    assert reward_texts(unmasked, tokenizer)[1] == ["577"]


def test_a_batch_without_the_chat_or_the_ground_truth_is_refused():
    tokenizer = build_tiny_tokenizer()
    batch = _batch(tokenizer, CHATS[:1], ["5"], ["5"], tokenizer.pad_token_id)
    no_chat = DataProto.from_dict(tensors=dict(batch.batch.items()),
                                  non_tensors={"reward_model": batch.non_tensor_batch["reward_model"]})
    with pytest.raises(KeyError, match="raw_prompt"):
        reward_texts(no_chat, tokenizer)
    text_prompt = DataProto.from_dict(tensors=dict(batch.batch.items()), non_tensors={
        "raw_prompt": _objects(["a plain string"]), "reward_model": batch.non_tensor_batch["reward_model"]})
    with pytest.raises(TypeError, match="list of chat messages"):
        reward_texts(text_prompt, tokenizer)


def _extract_on_a_worker(rank: int, port: int, rm_dir: str, results) -> None:
    import os

    import torch.distributed as dist

    from tests.helpers.typed_config import typed_section
    from tests.workers.reward_model.rm_fixtures import make_batch
    from verl.trainer.config.reward import RewardModelConfig
    from verl.utils.reward_process import reward_preprocess
    from verl.workers import reward_model_worker
    from verl.workers.fsdp_workers import RewardModelWorker

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        worker = RewardModelWorker(typed_section(RewardModelConfig, {"enable": True, "model.path": rm_dir}))
        worker.init_model()
        batch = make_batch(rows=4)
        batch.non_tensor_batch["reward_model"] = _objects([{"ground_truth": str(i)} for i in range(len(batch))])
        questions, answers, ground_truths = worker._extract_inputs_for_reward(batch)
        chats, extra = reward_preprocess(questions, answers, ground_truths)
        results["texts"] = (questions, answers, ground_truths)
        results["expected"] = reward_texts(batch, worker.tokenizer)
        results["chats"] = chats
        results["extra"] = extra.tolist()
        results["same_class"] = RewardModelWorker is reward_model_worker.RewardModelWorker
        results["rm_scores"] = worker.compute_rm_score(batch).batch["rm_scores"].shape
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_the_worker_extracts_what_its_tokenizer_decodes(tmp_path):
    from tests.helpers.ranks import free_port, run_ranks
    from tests.workers.reward_model.rm_fixtures import QUESTIONS, make_batch, make_tiny_rm_dir

    rm_dir = str(make_tiny_rm_dir(tmp_path / "rm"))
    results = run_ranks(_extract_on_a_worker, free_port(), rm_dir, nprocs=1, timeout_s=240)
    questions, answers, ground_truths = results["texts"]
    assert results["same_class"]  # upstream's fsdp_workers.RewardModelWorker is this repo's worker
    assert questions == QUESTIONS[:4] and ground_truths == ["0", "1", "2", "3"]
    assert (questions, answers, ground_truths) == tuple(results["expected"])
    assert answers[3] == "" and all(answers[:3])  # make_batch's row 3 has an empty response
    assert "<|im_end|>" not in "".join(answers)
    assert [chat[1]["content"].count(answer) >= 1 for chat, answer in zip(results["chats"], answers)] == [True] * 4
    assert results["extra"] == [0.0] * 4  # random tokens hold no "#### n" answer
    assert tuple(results["rm_scores"]) == tuple(make_batch(rows=4).batch["responses"].shape)  # scoring still works
