"""actor_rollout_ref.rollout.skip.* in RayPPOTrainer: the real fit loop and generation stage, with a counting fake
rollout worker group. A first run dumps its generations; a second run with the same dump dir generates nothing and
trains on identical batches, with the prompts and ground truths that belong to the replayed responses."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config.validate import load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

PROMPT, RESPONSE = 4, 3
SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
         f"data.max_prompt_length={PROMPT}", f"data.max_response_length={RESPONSE}", "trainer.val_before_train=false",
         "trainer.test_freq=-1", "trainer.logger=[]", "trainer.project_name=proj", "trainer.experiment_name=exp",
         "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.mode=sync"]


class RolloutGroup:
    """generate_sequences: random responses (a fresh draw each call), counted."""

    def __init__(self, seed: int) -> None:
        self.calls = 0
        self.gen = torch.Generator().manual_seed(seed)

    def generate_sequences(self, batch: DataProto) -> DataProto:
        self.calls += 1
        responses = torch.randint(0, 100, (len(batch), RESPONSE), generator=self.gen)
        return DataProto.from_dict(tensors={"prompts": batch.batch["input_ids"], "responses": responses},
                                   meta_info={"timing": {"gen": 0.1}})


def _rows(start: int, count: int) -> list[dict]:
    return [{"input_ids": torch.full((PROMPT,), start + i), "attention_mask": torch.ones(PROMPT, dtype=torch.long),
             "position_ids": torch.arange(PROMPT), "ground_truth": f"answer {start + i}"} for i in range(count)]


def _collate(rows: list[dict]) -> dict:
    out = {k: torch.stack([r[k] for r in rows]) for k in ("input_ids", "attention_mask", "position_ids")}
    out["ground_truth"] = np.array([r["ground_truth"] for r in rows], dtype=object)
    return out


class _Trainer(RayPPOTrainer):
    """The real fit loop and generation stage; the rest of the step only records the batch it would train on."""

    def __init__(self, config, wg: RolloutGroup, first_prompt: int) -> None:
        super().__init__(config, tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=0), role_worker_mapping={},
                         resource_pool_manager=None, train_dataset=_rows(first_prompt, 8), collate_fn=_collate)
        self.actor_rollout_wg = wg
        self.batches: list[DataProto] = []

    def train_step(self, batch_dict):
        self.batches.append(self._rollout(batch_dict, {}))
        return {"actor/pg_loss": 0.5}

    def _load_checkpoint(self) -> int:
        return 0

    def _save_checkpoint(self) -> None:
        pass


def _config(tmp_path, *extra: str):
    return validate_config(load_config([*SMALL, "actor_rollout_ref.rollout.skip.enable=true",
                                        f"actor_rollout_ref.rollout.skip.dump_dir={tmp_path}", *extra]),
                           check_files=False)


def _fit(config, seed: int, first_prompt: int = 0) -> tuple[_Trainer, RolloutGroup]:
    wg = RolloutGroup(seed)
    trainer = _Trainer(config, wg, first_prompt)
    trainer.fit()
    return trainer, wg


def _same(a: DataProto, b: DataProto) -> None:
    assert a.batch.keys() == b.batch.keys()
    for key in a.batch.keys():
        assert torch.equal(a.batch[key], b.batch[key]), key
    for key in ("ground_truth", "uid"):
        assert list(a.non_tensor_batch[key]) == list(b.non_tensor_batch[key]), key


def test_the_skip_keys_are_in_the_config_with_upstreams_defaults():
    skip = validate_config(load_config(SMALL), check_files=False).actor_rollout_ref.rollout.skip
    assert (skip.enable, skip.dump_dir, skip.dump_step, skip.compress) == (False, "/tmp/verl/rollout_dump", 1, True)
    # upstream's current spelling and default: action=cache (generate once the dumped rounds are done)
    assert (skip.max_dump_step, skip.action, skip.post_dump_action) == (1, "cache", "rollout")


def test_disabled_generates_every_step_and_writes_nothing(tmp_path):
    config = validate_config(load_config([*SMALL, "trainer.total_training_steps=2",
                                          f"actor_rollout_ref.rollout.skip.dump_dir={tmp_path}"]), check_files=False)
    trainer, wg = _fit(config, seed=0)
    assert wg.calls == 2 and trainer.rollout_skip is None
    assert not any(tmp_path.iterdir())


def test_first_run_dumps_and_a_second_run_replays_without_generating(tmp_path):
    config = _config(tmp_path, "trainer.total_training_steps=2", "actor_rollout_ref.rollout.skip.dump_step=2")
    first, first_wg = _fit(config, seed=0)
    assert first_wg.calls == 2
    dumps = sorted(p.name for p in (tmp_path / "exp_proj" / f"GBS2_N2_in{PROMPT}_out{RESPONSE}").iterdir())
    assert dumps == ["genstep_000001.pt", "genstep_000002.pt"]

    # other prompts in the data, another seed: only the dumps can make the batches equal
    second, second_wg = _fit(config, seed=1, first_prompt=50)
    assert second_wg.calls == 0
    assert len(second.batches) == 2
    for a, b in zip(first.batches, second.batches, strict=True):
        _same(a, b)
    assert list(second.batches[0].non_tensor_batch["ground_truth"]) == ["answer 0"] * 2 + ["answer 1"] * 2


def test_after_dump_step_repeat_cycles_and_rollout_with_dump_generates(tmp_path):
    config = _config(tmp_path, "trainer.total_training_steps=3", "actor_rollout_ref.rollout.skip.dump_step=1",
                     "actor_rollout_ref.rollout.skip.post_dump_action=repeat")
    trainer, wg = _fit(config, seed=0)
    assert wg.calls == 1  # step 1 generated and dumped; steps 2 and 3 replay it (post_dump_action=repeat)
    _same(trainer.batches[0], trainer.batches[2])

    other = tmp_path / "other"
    config = _config(other, "trainer.total_training_steps=3", "actor_rollout_ref.rollout.skip.dump_step=1",
                     "actor_rollout_ref.rollout.skip.post_dump_action=rollout_with_dump",
                     "actor_rollout_ref.rollout.skip.compress=false")
    trainer, wg = _fit(config, seed=0)
    assert wg.calls == 3
    assert len(list(other.rglob("genstep_*.pt"))) == 3


@pytest.mark.parametrize("action", ["cache", "repeat", "repeat_last"])
def test_upstreams_current_spelling_max_dump_step_and_action(tmp_path, action):
    """max_dump_step / action (upstream's current rollout_skip): two rounds dumped, then cache generates, repeat
    cycles through the dumps, repeat_last replays the second."""
    config = _config(tmp_path, "trainer.total_training_steps=4", "actor_rollout_ref.rollout.skip.max_dump_step=2",
                     f"actor_rollout_ref.rollout.skip.action={action}")
    skip = config.actor_rollout_ref.rollout.skip
    assert skip.dump_step == 2 and skip.post_dump_action == {"cache": "rollout"}.get(action, action)
    trainer, wg = _fit(config, seed=0)
    dumps = list(tmp_path.rglob("genstep_*.pt"))
    assert len(dumps) == 2
    if action == "cache":
        assert wg.calls == 4
    else:
        assert wg.calls == 2
        _same(trainer.batches[2], trainer.batches[0 if action == "repeat" else 1])
        _same(trainer.batches[3], trainer.batches[1])


def test_the_two_spellings_are_one_setting(tmp_path):
    skip = _config(tmp_path, "actor_rollout_ref.rollout.skip.post_dump_action=repeat_last",
                   "actor_rollout_ref.rollout.skip.dump_step=3").actor_rollout_ref.rollout.skip
    assert (skip.max_dump_step, skip.action) == (3, "repeat_last")  # the earlier spelling reads back in the current
    same = _config(tmp_path, "actor_rollout_ref.rollout.skip.post_dump_action=repeat",
                   "actor_rollout_ref.rollout.skip.action=repeat").actor_rollout_ref.rollout.skip
    assert same.post_dump_action == "repeat"
    with pytest.raises(Exception, match="skip.dump_step=2 and skip.max_dump_step=3 are the same setting"):
        _config(tmp_path, "actor_rollout_ref.rollout.skip.dump_step=2", "actor_rollout_ref.rollout.skip.max_dump_step=3")
    with pytest.raises(Exception, match="skip.post_dump_action=rollout and skip.action=repeat say different things"):
        _config(tmp_path, "actor_rollout_ref.rollout.skip.post_dump_action=rollout",
                "actor_rollout_ref.rollout.skip.action=repeat")


def test_validation_and_remax_generate_through_the_worker_group_itself(tmp_path):
    config = _config(tmp_path, "trainer.total_training_steps=1")
    wg = RolloutGroup(0)
    trainer = _Trainer(config, wg, 0)
    trainer.fit()
    assert trainer._train_rollout is not wg and wg.calls == 1
    trainer.actor_rollout_wg.generate_sequences(DataProto.from_dict(tensors={"input_ids": torch.zeros(2, PROMPT)}))
    assert wg.calls == 2  # the group's own method is not patched


@pytest.mark.parametrize("action", ["repeat", "repeat_last"])
def test_dump_step_zero_with_a_replay_action_is_refused_before_ray(tmp_path, action):
    with pytest.raises(Exception, match="skip.dump_step=0 dumps nothing"):
        _config(tmp_path, "actor_rollout_ref.rollout.skip.dump_step=0",
                f"actor_rollout_ref.rollout.skip.post_dump_action={action}")


def test_an_unknown_action_is_refused(tmp_path):
    with pytest.raises(Exception, match="post_dump_action"):
        _config(tmp_path, "actor_rollout_ref.rollout.skip.post_dump_action=exit")
