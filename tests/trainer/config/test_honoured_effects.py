"""Effects of keys that no other test shows (named in honoured_keys.py)."""

from __future__ import annotations

from verl.trainer.config.validate import load_config, validate_config


def test_custom_chat_template_replaces_the_tokenizers_template(tmp_path):
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from verl.models.loader import load_tokenizer

    build_tiny_tokenizer().save_pretrained(tmp_path)
    messages = [{"role": "user", "content": "hi"}]
    own = load_tokenizer(str(tmp_path), "actor_rollout_ref.model.path")
    assert own.apply_chat_template(messages, tokenize=False) == "<|im_start|>user\nhi<|im_end|>\n"
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
    custom = load_tokenizer(str(tmp_path), "actor_rollout_ref.model.path", custom_chat_template=template)
    assert custom.apply_chat_template(messages, tokenize=False) == "[user] hi"


def test_val_only_validates_and_trains_no_step():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    class Trainer(RayPPOTrainer):
        def train_step(self, batch_dict):
            self.steps_run.append(self.global_steps)
            return {}

        def _load_checkpoint(self) -> int:
            return 0

        def _save_checkpoint(self) -> None:
            pass

    class Validator:
        enabled = True

        def run(self, step: int) -> dict[str, float]:
            return {"val-core/arithmetic/reward/mean@1": 0.5}

    class Tracker:
        def __init__(self) -> None:
            self.logged: list[int] = []

        def log(self, data: dict, step: int) -> None:
            self.logged.append(step)

    def run(val_only: bool) -> tuple[list[int], list[int]]:
        overrides = [
            "data.train_batch_size=2", "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.logger=[]",
            "trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
            "critic.ppo_micro_batch_size_per_gpu=1", f"trainer.val_only={str(val_only).lower()}",
        ]
        config = validate_config(load_config(overrides), check_files=False)
        trainer = Trainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                          train_dataset=[{"x": i} for i in range(8)], collate_fn=lambda rows: rows)
        trainer.steps_run = []
        trainer.validator, trainer.tracker = Validator(), Tracker()
        trainer.fit()
        return trainer.steps_run, trainer.tracker.logged

    assert run(val_only=True) == ([], [0])
    steps, logged = run(val_only=False)
    assert steps == [1, 2] and logged[0] == 0
