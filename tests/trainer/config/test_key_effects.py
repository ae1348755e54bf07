"""Effect tests for ppo_trainer.yaml keys whose audit entry (honoured_keys.py) used to name a test that did not
exercise them: each test here changes the key and observes what the runtime does differently."""

from __future__ import annotations

import copy
import dataclasses
import json
import os

import pytest
import torch

from tests.helpers.tiny_model import EOS_ID, PAD_ID, left_padded_prompts, save_tiny_model_dir, tiny_llama
from tests.trainer.ppo.test_fit_loop import SMALL
from tests.utils.test_torch_functional import _lrs
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl import algos
from verl.protocol import DataProto
from verl.trainer.config import ConfigError, load_config, validate_config
from verl.workers.actor import DataParallelPPOActor
from verl.workers.fsdp_workers import normalize_ppo_batch_sizes

ARR = "actor_rollout_ref"


def typed(*overrides: str):
    return validate_config(load_config([*SMALL, "data.train_batch_size=2", "trainer.logger=[]", *overrides]),
                           check_files=False)


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        typed(*overrides)
    return info.value.problems


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A tiny Llama and the tiny tokenizer saved as a HF folder."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))


# ---------------------------------------------------------------- actor.policy_loss.loss_mode


def test_loss_mode_picks_the_policy_loss_the_actor_uses(monkeypatch):
    model = tiny_llama()
    data = training_batch(model)
    registered = algos.get_policy_loss_fn
    asked: list[str] = []
    monkeypatch.setattr(algos, "get_policy_loss_fn", lambda name: asked.append(name) or registered(name))
    pg_loss = {}
    for mode in ("vanilla", "gspo"):
        # one mini-batch of one micro-batch: the reported pg_loss is the loss of the whole batch
        cfg = actor_config(**{"policy_loss.loss_mode": mode, "ppo_micro_batch_size_per_gpu": 4})
        copy_ = copy.deepcopy(model)
        actor = DataParallelPPOActor(cfg, copy_, torch.optim.SGD(copy_.parameters(), lr=0.1))
        log_prob, _ = actor.compute_log_prob(DataProto(batch=data.batch, meta_info={**data.meta_info,
                                                                                    "micro_batch_size": 4}))
        b = data.batch
        expected, _ = registered(mode)(old_log_prob=b["old_log_probs"], log_prob=log_prob, advantages=b["advantages"],
                                       response_mask=b["response_mask"], loss_agg_mode=cfg.loss_agg_mode, config=cfg)
        (pg_loss[mode],) = actor.update_policy(data)["actor/pg_loss"]
        assert pg_loss[mode] == pytest.approx(expected.item(), abs=1e-5)
    assert asked == ["vanilla", "gspo"]
    assert abs(pg_loss["vanilla"] - pg_loss["gspo"]) > 1e-3  # the two losses really differ on this batch


# ---------------------------------------------------------------- strategy, fsdp_config sections, trust_remote_code


def _worker_config(model_dir: str, strategy: str, actor_trust: bool, critic_trust: bool):
    return typed(
        f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", f"{ARR}.rollout.name=hf",
        f"{ARR}.actor.use_kl_loss=true", f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu=1",
        f"{ARR}.ref.log_prob_micro_batch_size_per_gpu=1",
        f"{ARR}.actor.strategy={strategy}", f"{ARR}.ref.strategy={strategy}", f"critic.strategy={strategy}",
        f"{ARR}.model.trust_remote_code={actor_trust}", f"critic.model.trust_remote_code={critic_trust}",
        # three distinct fsdp sections, so the section apply_fsdp2 received tells whose it was (offload is a
        # warning on CPU, so the modules stay the same)
        f"{ARR}.ref.fsdp_config.param_offload=true", "critic.model.fsdp_config.optimizer_offload=true",
        # critic.model.tokenizer_path: the model folder's tokenizer in one build, none in the other
        *([] if strategy == "fsdp" else ["critic.model.tokenizer_path=null"]),
        # model.enable_activation_offload: on in one build (the trained actor and critic), off in the other
        *([f"{ARR}.model.enable_activation_offload=true", "critic.model.enable_activation_offload=true"]
          if strategy == "fsdp" else []),
    )


def _build_workers(rank: int, port: int, model_dir: str, results) -> None:
    """Builds the real ActorRolloutRefWorker (actor + HF rollout + ref) and CriticWorker on one gloo rank, with
    spies on apply_fsdp2, build_rollout and the HF loaders; reports plain values."""
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import FSDPModule

    from verl.models.activation_offload import activation_offload_enabled
    from verl.workers import fsdp_workers
    from verl.workers.rollout import registry

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    seen_fsdp, seen_rollout, seen_loads = [], [], []
    real_apply, real_build = fsdp_workers.apply_fsdp2, registry.build_rollout
    fsdp_workers.apply_fsdp2 = lambda module, fsdp, mesh, **kw: seen_fsdp.append(fsdp) or real_apply(module, fsdp,
                                                                                                  mesh, **kw)
    registry.build_rollout = lambda *a, **kw: seen_rollout.append(kw.get("trust_remote_code")) or real_build(*a, **kw)
    for cls in (transformers.AutoTokenizer, transformers.AutoModelForCausalLM,
                transformers.AutoModelForTokenClassification):
        real = cls.from_pretrained

        def spy(*args, _real=real, _name=cls.__name__, **kwargs):
            seen_loads.append((_name, kwargs.get("trust_remote_code")))
            return _real(*args, **kwargs)

        cls.from_pretrained = spy
    try:
        for strategy, actor_trust, critic_trust in (("fsdp", True, False), ("fsdp2", False, True)):
            seen_fsdp.clear(), seen_rollout.clear(), seen_loads.clear()
            config = _worker_config(model_dir, strategy, actor_trust, critic_trust)
            arr = config.actor_rollout_ref
            actor = fsdp_workers.ActorRolloutRefWorker(arr, "actor_rollout_ref")
            actor.init_model()
            critic = fsdp_workers.CriticWorker(config.critic)
            critic.init_model()
            sections = {"actor": arr.actor.fsdp_config, "ref": arr.ref.fsdp_config,
                        "critic": config.critic.model.fsdp_config}
            modules = {"actor": actor.actor_module, "ref": actor.ref_module, "critic": critic.critic_module}
            layers = {name: [m, *m.model.layers] for name, m in modules.items()}  # the root and every decoder layer
            entry = {
                "fsdp2": {name: all(isinstance(m, FSDPModule) for m in ms) for name, ms in layers.items()},
                "sections": [[name for name, s in sections.items() if s == fsdp] for fsdp in seen_fsdp],
                "rollout_trust": list(seen_rollout),
                "loads": list(seen_loads),
                "offload": {name: activation_offload_enabled(m) for name, m in modules.items()},
            }
            ckpt = os.path.join(model_dir, f"critic_ckpt_{strategy}")
            critic._checkpoint_manager().save_checkpoint(ckpt, None, 1, None)
            entry["critic_ckpt_files"] = sorted(
                name for _, _, files in os.walk(ckpt) for name in files if name.startswith("tokenizer"))
            results[strategy] = entry  # a proxy dict: assign the finished entry, nested writes are lost
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def built_workers(model_dir) -> dict:
    from tests.helpers.ranks import free_port, run_ranks

    return run_ranks(_build_workers, free_port(), model_dir, nprocs=1, timeout_s=220)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("key", [f"{ARR}.actor.strategy", f"{ARR}.ref.strategy", "critic.strategy"])
def test_strategy_fsdp_and_fsdp2_both_shard_with_fsdp2_and_others_are_refused(built_workers, key):
    # fsdp and fsdp2 are synonyms here: both build FSDP2 (fully_shard) units, every decoder layer and the root
    for strategy in ("fsdp", "fsdp2"):
        assert built_workers[strategy]["fsdp2"] == {"actor": True, "ref": True, "critic": True}
    for other in ("megatron", "ddp"):
        assert any(p.startswith(f"{key}=") and other in p for p in problems(f"{key}={other}"))


@pytest.mark.timeout(240)
def test_ref_and_critic_fsdp_sections_reach_apply_fsdp2(built_workers):
    # actor_rollout_ref builds actor (then the rollout around it) and ref; the critic worker its own module
    for strategy in ("fsdp", "fsdp2"):
        assert built_workers[strategy]["sections"] == [["actor"], ["ref"], ["critic"]]


@pytest.mark.timeout(240)
def test_model_trust_remote_code_reaches_every_load_of_the_worker(built_workers):
    for strategy, trust in (("fsdp", True), ("fsdp2", False)):
        run = built_workers[strategy]
        actor_side = [t for name, t in run["loads"] if name in ("AutoTokenizer", "AutoModelForCausalLM")]
        assert len(actor_side) == 3 and set(actor_side) == {trust}  # tokenizer, actor and ref weights
        assert run["rollout_trust"] == [trust]  # build_rollout passes it on to the engine


@pytest.mark.timeout(240)
def test_critic_tokenizer_path_is_saved_with_the_critic_checkpoint(built_workers):
    # the critic reads token ids; its tokenizer_path is the tokenizer its HF checkpoint folder carries
    assert "tokenizer_config.json" in built_workers["fsdp"]["critic_ckpt_files"]
    assert built_workers["fsdp2"]["critic_ckpt_files"] == []  # critic.model.tokenizer_path=null


@pytest.mark.timeout(240)
def test_critic_trust_remote_code_reaches_the_value_model_load(built_workers):
    for strategy, trust in (("fsdp", False), ("fsdp2", True)):
        critic_side = [t for name, t in built_workers[strategy]["loads"] if name == "AutoModelForTokenClassification"]
        assert critic_side == [trust]


@pytest.mark.timeout(240)
def test_enable_activation_offload_reaches_the_trained_modules_only(built_workers):
    # the actor's and the critic's layers get the saved-tensor hooks; the reference policy trains nothing
    assert built_workers["fsdp"]["offload"] == {"actor": True, "ref": False, "critic": True}
    assert built_workers["fsdp2"]["offload"] == {"actor": False, "ref": False, "critic": False}


# ---------------------------------------------------------------- rollout.mode


def test_rollout_mode_async_is_the_default_and_multi_turn_needs_it():
    from verl.workers.rollout.registry import build_rollout

    assert typed().actor_rollout_ref.rollout.mode == "async"  # the agent loop, upstream's default
    (message,) = problems(f"{ARR}.rollout.multi_turn.enable=true", "data.return_raw_chat=true",
                          f"{ARR}.rollout.mode=sync")
    assert "needs actor_rollout_ref.rollout.mode=async" in message
    rollout_cfg = typed("data.max_response_length=3", "data.max_prompt_length=4",
                        f"{ARR}.rollout.mode=sync").actor_rollout_ref.rollout
    assert rollout_cfg.mode == "sync"  # the engine's own batched generate_sequences
    rollout, _ = build_rollout(rollout_cfg, tiny_llama(), None, "", None)
    ids, mask, pos = left_padded_prompts([4, 2], 4)
    out = rollout.generate_sequences(DataProto.from_dict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": pos},
        meta_info={"eos_token_id": EOS_ID, "pad_token_id": PAD_ID}))
    assert out.batch["responses"].shape == (2, 3) and torch.equal(out.batch["prompts"], ids)


# ---------------------------------------------------------------- critic.rollout_n / actor.rollout_n


def test_rollout_n_scales_the_mini_batch_and_must_equal_rollout_n():
    # ppo_mini_batch_size counts prompts; each rank gets mini x rollout_n / ranks responses per optimizer step
    critic = typed("algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=2").critic
    for n, per_rank in ((1, 1), (4, 4)):
        out = normalize_ppo_batch_sizes(dataclasses.replace(critic, rollout_n=n), "critic", 2)
        assert out.ppo_mini_batch_size == per_rank
    assert critic.ppo_mini_batch_size == 2  # normalising returns a copy; the shared config is untouched
    actor = typed(f"{ARR}.actor.ppo_mini_batch_size=2").actor_rollout_ref.actor
    for n, per_rank in ((1, 1), (4, 4)):
        assert normalize_ppo_batch_sizes(dataclasses.replace(actor, rollout_n=n), f"{ARR}.actor", 2) \
            .ppo_mini_batch_size == per_rank
    # both follow rollout.n; another value is an error, not a silently different mini-batch
    assert any(p.startswith("critic.rollout_n (3) differs from") for p in problems("critic.rollout_n=3"))
    assert any(p.startswith(f"{ARR}.actor.rollout_n (3) differs from") for p in problems(f"{ARR}.actor.rollout_n=3"))


# ---------------------------------------------------------------- trainer.critic_warmup


class _Group:
    """A worker group that records which updates the trainer asked for."""

    def __init__(self, calls: list[tuple[str, int]], trainer) -> None:
        self.calls, self.trainer = calls, trainer

    def _update(self, name: str) -> DataProto:
        self.calls.append((name, self.trainer.global_steps))
        return DataProto(meta_info={"metrics": {f"{name}/loss": [0.5]}})

    def update_actor(self, batch: DataProto) -> DataProto:
        return self._update("actor")

    def compute_values(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict({"values": torch.zeros(len(batch), 1)})

    def update_critic(self, batch: DataProto) -> DataProto:
        return self._update("critic")


class _Pools:
    def get_n_gpus(self) -> int:
        return 1


def _warmup_run(monkeypatch, warmup: int) -> list[tuple[str, int]]:
    """The real fit() and train_step(); generation, scoring and advantages are stubbed, the update calls recorded."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    for name in ("compute_data_metrics", "compute_timing_metrics", "compute_throughout_metrics",
                 "compute_stage_throughput_metrics"):
        monkeypatch.setattr(ray_trainer, name, lambda *a, **kw: {})
    config = typed("algorithm.adv_estimator=gae", "trainer.total_training_steps=4", "trainer.val_before_train=false",
                   "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.balance_batch=false",
                   f"trainer.critic_warmup={warmup}")
    trainer = RayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=_Pools(),
                            train_dataset=[{"x": i} for i in range(8)], collate_fn=lambda rows: rows)
    calls: list[tuple[str, int]] = []
    trainer.actor_rollout_wg = trainer.critic_wg = _Group(calls, trainer)
    trainer._load_checkpoint = lambda: 0
    trainer._new_batch = lambda batch_dict: DataProto.from_dict({"x": torch.zeros(len(batch_dict), 1)})
    trainer._generate = lambda batch: batch
    trainer._start_reward = lambda batch: None
    trainer._add_old_log_prob = lambda batch, metrics: None
    trainer._finish_reward = lambda reward: (None, {})
    trainer._compute_advantage = lambda batch, reward_tensor, extra, metrics: batch
    assert trainer.use_critic and not trainer.use_reference_policy
    trainer.fit()
    return calls


def test_critic_warmup_trains_only_the_critic_for_its_steps(monkeypatch):
    warm = _warmup_run(monkeypatch, warmup=2)
    assert [step for name, step in warm if name == "critic"] == [1, 2, 3, 4]
    assert [step for name, step in warm if name == "actor"] == [3, 4]  # not while global_steps <= critic_warmup
    cold = _warmup_run(monkeypatch, warmup=0)
    assert [step for name, step in cold if name == "actor"] == [1, 2, 3, 4]


# ---------------------------------------------------------------- trainer.n_gpus_per_node / trainer.nnodes


def test_gpus_per_node_and_nnodes_size_the_pool_and_the_batch_checks():
    from verl.trainer.ppo.launcher import role_worker_mapping

    for nodes, per_node in ((1, 1), (1, 2), (2, 1), (3, 2)):
        config = typed(f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={per_node}",
                       f"data.train_batch_size={nodes * per_node * 2}",
                       f"{ARR}.actor.ppo_mini_batch_size={nodes * per_node}", f"critic.ppo_mini_batch_size={nodes * per_node}")
        _, pools = role_worker_mapping(config)
        assert pools.resource_pool_spec == {"global_pool": [per_node] * nodes}  # one worker process per entry
        assert pools.get_n_gpus() == config.world_size == nodes * per_node
    # 1 prompt x 3 responses per optimizer step: fine on one worker, not splittable over 2, whichever key makes it 2
    grpo = ["algorithm.adv_estimator=grpo", f"{ARR}.rollout.n=3", f"{ARR}.actor.ppo_mini_batch_size=1"]
    typed(*grpo)
    for nodes, per_node in ((1, 2), (2, 1)):
        found = problems(*grpo, f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={per_node}")
        assert any("over 2 data-parallel workers" in p and f"{nodes} * {per_node} / 1" in p for p in found), found


# ---------------------------------------------------------------- trainer.report_dir, data.trust_remote_code


def _launch_with_stubs(monkeypatch, tmp_path, model_dir: str, *overrides: str) -> list:
    """launcher.run_training on a real typed config and real data, tokenizer and reward manager; Ray and the
    trainer are stubs (its fit() logs two steps). Returns the trust_remote_code of every tokenizer load."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import transformers

    from verl.trainer.ppo import launcher, ray_trainer
    from verl.utils import ray_utils

    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(4)],
                             "data_source": ["arithmetic"] * 4,
                             "reward_model": [{"ground_truth": str(i + 1), "style": "rule"} for i in range(4)]}), data)

    class _StubTrainer:
        def __init__(self, config, tokenizer, mapping, pools, **kwargs) -> None:
            self.config = config  # as RayPPOTrainer: run_training releases the checkpoint folder's lock through it
            self.tracker = kwargs["tracker"]

        def init_workers(self) -> None:
            pass

        def fit(self) -> None:
            for step in (1, 2):
                self.tracker.log({"critic/score/mean": 0.25 * step}, step=step)

    loads = []
    real = transformers.AutoTokenizer.from_pretrained

    def spy(*args, **kwargs):
        loads.append(kwargs.get("trust_remote_code"))
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy)
    monkeypatch.setattr(ray_utils, "init_ray", lambda *a, **kw: None)
    monkeypatch.setattr(ray_trainer, "RayPPOTrainer", _StubTrainer)
    config = typed(f"{ARR}.model.path={model_dir}", f"data.train_files=[{data}]", "data.val_files=null",
                   f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.logger=[console]", *overrides)
    launcher.run_training(config)
    return loads


def test_report_dir_is_where_the_run_report_goes(monkeypatch, tmp_path, model_dir):
    report = tmp_path / "elsewhere"
    _launch_with_stubs(monkeypatch, tmp_path, model_dir, f"trainer.report_dir={report}")
    assert {"metrics.jsonl", "metrics.csv", "summary.json", "README.md"} <= set(os.listdir(report))
    rows = [json.loads(line) for line in (report / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert not (tmp_path / "run" / "report").exists()
    _launch_with_stubs(monkeypatch, tmp_path, model_dir)  # the default: default_local_dir/report
    assert "summary.json" in os.listdir(tmp_path / "run" / "report")


def test_data_trust_remote_code_reaches_the_drivers_tokenizer(monkeypatch, tmp_path, model_dir):
    for trust in (True, False):
        loads = _launch_with_stubs(monkeypatch, tmp_path, model_dir, f"data.trust_remote_code={trust}",
                                   f"{ARR}.model.trust_remote_code={not trust}")
        assert loads == [trust]


# ---------------------------------------------------------------- actor.optim.* / critic.optim.*


@pytest.mark.parametrize("section", [f"{ARR}.actor.optim", "critic.optim"])
def test_optim_keys_build_the_optimizer_and_its_schedule(section):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.workers.fsdp_utils import build_lr_scheduler, build_optimizer

    def optim(*overrides: str):
        config = typed(*(f"{section}.{o}" for o in overrides))
        return config.actor_rollout_ref.actor.optim if section.startswith(ARR) else config.critic.optim

    def lrs(o, steps: int) -> list[float]:
        return _lrs(build_lr_scheduler(build_optimizer(torch.nn.Linear(2, 2), o, section), o, section), steps)

    (group,) = build_optimizer(torch.nn.Linear(2, 2), optim("lr=0.1", "betas=[0.5,0.6]", "weight_decay=0.2"),
                               section).param_groups
    assert (group["lr"], group["betas"], group["weight_decay"]) == (0.1, (0.5, 0.6), 0.2)
    # constant: warmup of lr_warmup_steps, or (when it is -1) lr_warmup_steps_ratio of total_training_steps
    ratio = optim("lr=0.1", "lr_scheduler_type=constant", "lr_warmup_steps=-1", "lr_warmup_steps_ratio=0.25",
                  "total_training_steps=8")
    assert lrs(ratio, 4) == pytest.approx([0.0, 0.05, 0.1, 0.1])
    steps = optim("lr=0.1", "lr_scheduler_type=constant", "lr_warmup_steps=1", "lr_warmup_steps_ratio=0.25")
    assert lrs(steps, 3) == pytest.approx([0.0, 0.1, 0.1])
    # cosine from lr to min_lr_ratio * lr over total_training_steps: lr * (0.6 + 0.4 cos(2 pi num_cycles s / 4))
    cosine = ["lr=0.1", "lr_scheduler_type=cosine", "lr_warmup_steps=0", "min_lr_ratio=0.2", "total_training_steps=4"]
    assert lrs(optim(*cosine, "num_cycles=0.5"), 5) == pytest.approx([0.1, 0.0883, 0.06, 0.0317, 0.02], abs=1e-4)
    # upstream's deprecated warmup_style still picks the schedule; a schedule we do not implement is refused
    legacy = ["lr=0.1", "warmup_style=cosine", "lr_warmup_steps=0", "min_lr_ratio=0.2", "total_training_steps=4"]
    assert lrs(optim(*legacy), 5) == pytest.approx([0.1, 0.0883, 0.06, 0.0317, 0.02], abs=1e-4)
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        optim("lr_scheduler_type=linear")
    with pytest.raises(ValueError, match="disagree"):
        optim("lr_scheduler_type=cosine", "warmup_style=constant")
    assert lrs(optim(*cosine, "num_cycles=1.0"), 5) == pytest.approx([0.1, 0.06, 0.02, 0.06, 0.1], abs=1e-4)
    # the trainer fills total_training_steps in from its own horizon before the workers build the schedules
    config = typed("trainer.total_training_steps=6")
    RayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                  train_dataset=[{"x": i} for i in range(8)], collate_fn=lambda rows: rows)
    assert config.actor_rollout_ref.actor.optim.total_training_steps == config.critic.optim.total_training_steps == 6
