"""Effect tests for ppo_trainer.yaml keys the launcher and the trainer read (data files and sample caps, the
tracker's names and backends, return_full_prompt, max_response_length, total_epochs) and for a few worker keys
(sapo's temperatures, checkpoint.load_contents, rollout.disable_log_stats, fsdp_config.model_dtype and
reshard_after_forward). Each test sets the key in the config, runs the code that reads it, and checks what changed."""

from __future__ import annotations

import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.checkpoint.test_trainer_checkpointing import DATASET, make_trainer
from tests.helpers.fake_mlflow import install_fake_mlflow
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.trainer.config import test_key_effects
from tests.trainer.config.test_key_effects import _launch_with_stubs, typed
from tests.workers.reward_manager.conftest import make_batch
from verl import algos

ARR = "actor_rollout_ref"
model_dir = test_key_effects.model_dir  # the tiny HF model folder fixture, shared rather than rebuilt


# ---------------------------------------------------------------- shared: what the launcher hands the trainer


class _RecordingPatch:
    """pytest's monkeypatch, except that the stub trainer `_launch_with_stubs` installs also records the keyword
    arguments the launcher builds it with (datasets, tracker, ...)."""

    def __init__(self, monkeypatch, seen: dict) -> None:
        self._patch, self._seen = monkeypatch, seen

    def setattr(self, target, name, value, *args, **kwargs):
        if name == "RayPPOTrainer":
            stub, seen = value, self._seen

            class Recording(stub):
                def __init__(self, config, tokenizer, mapping, pools, **built) -> None:
                    seen.update(built)
                    super().__init__(config, tokenizer, mapping, pools, **built)

            value = Recording
        return self._patch.setattr(target, name, value, *args, **kwargs)


def _launch(monkeypatch, tmp_path, model_dir: str, *overrides: str) -> dict:
    seen: dict = {}
    _launch_with_stubs(_RecordingPatch(monkeypatch, seen), tmp_path, model_dir, *overrides)
    assert "train_dataset" in seen, "the stub trainer was not built through the recording patch"
    return seen


def _parquet(path, questions: list[str]) -> str:
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": q}] for q in questions],
                             "data_source": ["arithmetic"] * len(questions),
                             "reward_model": [{"ground_truth": "0", "style": "rule"}] * len(questions)}), path)
    return str(path)


# ---------------------------------------------------------------- data.train_files / val_files / *_max_samples


def test_data_files_and_max_samples_build_the_datasets_the_trainer_gets(monkeypatch, tmp_path, model_dir):
    more = _parquet(tmp_path / "more.parquet", [f"Compute {i} - 1." for i in range(3)])
    val_a = _parquet(tmp_path / "val_a.parquet", ["Compute 7 * 2.", "Compute 8 * 2."])
    val_b = _parquet(tmp_path / "val_b.parquet", ["Compute 9 * 2."])
    train = str(tmp_path / "train.parquet")  # the 4 rows _launch_with_stubs writes
    # no caps: every row of every file, in file order
    seen = _launch(monkeypatch, tmp_path, model_dir, f"data.train_files=[{train},{more}]",
                   f"data.val_files=[{val_a},{val_b}]", "data.shuffle=false")
    train_set, val_set = seen["train_dataset"], seen["val_dataset"]
    assert train_set.data_files == [train, more] and len(train_set) == 4 + 3
    assert val_set.data_files == [val_a, val_b] and len(val_set) == 2 + 1
    assert seen["tracker"] is not None
    # the caps take the first rows (without shuffle), each from its own split
    seen = _launch(monkeypatch, tmp_path, model_dir, f"data.train_files=[{train},{more}]",
                   f"data.val_files=[{val_a},{val_b}]", "data.shuffle=false", "data.train_max_samples=5",
                   "data.val_max_samples=1")
    train_set, val_set = seen["train_dataset"], seen["val_dataset"]
    assert len(train_set) == 5 and len(val_set) == 1
    tokenizer = build_tiny_tokenizer()
    assert tokenizer.decode(val_set[0]["raw_prompt_ids"]).count("Compute 7 * 2.") == 1
    assert tokenizer.decode(train_set[4]["raw_prompt_ids"]).count("Compute 0 - 1.") == 1  # row 5: more's first
    # data.val_files=null: no validation set at all
    assert _launch(monkeypatch, tmp_path, model_dir, f"data.train_files=[{more}]")["val_dataset"] is None


# ---------------------------------------------------------------- data.return_full_prompt


def test_return_full_prompt_adds_the_templated_text_to_the_trainers_items(monkeypatch, tmp_path, model_dir):
    plain = _launch(monkeypatch, tmp_path, model_dir)["train_dataset"][0]
    assert "full_prompts" not in plain
    item = _launch(monkeypatch, tmp_path, model_dir, "data.return_full_prompt=true")["train_dataset"][0]
    tokenizer = build_tiny_tokenizer()
    expected = tokenizer.apply_chat_template([{"role": "user", "content": "Compute 0 + 1."}], tokenize=False,
                                             add_generation_prompt=True)
    assert item["full_prompts"] == expected
    assert tokenizer.encode(item["full_prompts"], add_special_tokens=False) == item["raw_prompt_ids"]


# ---------------------------------------------------------------- trainer.logger / project_name / experiment_name




def test_logger_and_names_choose_the_trackers_backends(monkeypatch, tmp_path, model_dir, capsys):
    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    calls = install_fake_mlflow(monkeypatch)
    report = tmp_path / "report"
    tracker = _launch(monkeypatch, tmp_path, model_dir, f"trainer.report_dir={report}", "trainer.logger=[]")["tracker"]
    assert list(tracker.logger) == ["file"]  # the run report's metrics.jsonl is always written
    assert "step:1" not in capsys.readouterr().out and not (report / "tensorboard").exists()
    assert calls == {"params": {}, "metrics": []}

    tracker = _launch(monkeypatch, tmp_path, model_dir, f"trainer.report_dir={report}",
                      "trainer.logger=[console,tensorboard,mlflow]", "trainer.project_name=proj_x",
                      "trainer.experiment_name=exp_y", "trainer.console_format=full")["tracker"]
    assert list(tracker.logger) == ["console", "tensorboard", "mlflow", "file"]
    # trainer.console_format=full: upstream's line of every metric (the stub fit's second step, on stdout)
    assert "step:2 - critic/score/mean:0.5" in capsys.readouterr().out
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(report / "tensorboard"))
    # mlflow's experiment is the project, its run the experiment, with the steps the stub fit logged
    assert (calls["experiment"], calls["run_name"]) == ("proj_x", "exp_y")
    assert calls["uri"] == "file:" + str(report / "mlruns")
    assert calls["metrics"] == [(1, {"critic/score/mean": 0.25}), (2, {"critic/score/mean": 0.5})]
    assert calls["params"]["trainer.project_name"] == "proj_x"  # the whole typed config, flattened
    assert calls["ended"]

    # the default trainer.console_format=compact: a header, then one aligned row per step
    _launch(monkeypatch, tmp_path, model_dir, f"trainer.report_dir={report}", "trainer.logger=[console]")
    out = capsys.readouterr().out
    assert "step:2" not in out and " step  train reward  val score" in out and "\n    2        0.5000\n" in out


# ---------------------------------------------------------------- data.max_response_length


def test_max_response_length_is_the_rollout_length_and_dapos_limit():
    from verl.trainer.ppo.reward import load_reward_manager

    tokenizer = build_tiny_tokenizer()
    samples = [("Tom has 12", "12 + 2 = 14. #### 14", "14")]
    data, (length,) = make_batch(tokenizer, samples)
    rewards = {}
    for limit in (length + 2, length + 8):
        config = typed(f"data.max_response_length={limit}", "reward_model.reward_manager=dapo",
                       "reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4",
                       "reward_model.overlong_buffer.penalty_factor=1.0", "reward_model.overlong_buffer.log=true")
        assert config.actor_rollout_ref.rollout.response_length == limit  # ${data.max_response_length}
        out = load_reward_manager(config, tokenizer, num_examine=0)(data, return_dict=True)
        rewards[limit] = out["reward_extra_info"]["overlong_reward"]
    # the penalty starts 4 tokens (the buffer) before the limit: 2 tokens into it is -2/4, 4 tokens short is 0
    assert rewards == {length + 2: [-0.5], length + 8: [0.0]}


# ---------------------------------------------------------------- actor.policy_loss.tau_pos / tau_neg


@pytest.mark.parametrize("key, advantage", [("tau_pos", 2.0), ("tau_neg", -2.0)])
def test_sapo_temperatures_set_the_soft_gate(key, advantage):
    # one token, ratio 1.5: loss = -A * sigmoid(tau (r - 1)) * 4 / tau, tau picked by the advantage's sign
    old, new, adv = torch.zeros(1, 1), torch.tensor([[math.log(1.5)]]), torch.tensor([[advantage]])
    sapo = algos.get_policy_loss_fn("sapo")
    losses = {}
    for tau in (None, 3.0):
        overrides = [f"{ARR}.actor.policy_loss.loss_mode=sapo"]
        overrides += [] if tau is None else [f"{ARR}.actor.policy_loss.{key}={tau}"]
        actor = typed(*overrides).actor_rollout_ref.actor
        losses[tau], _ = sapo(old_log_prob=old, log_prob=new, advantages=adv, response_mask=torch.ones(1, 1),
                              config=actor)
    default_tau = 1.0 if key == "tau_pos" else 1.05

    def hand(tau: float) -> float:
        return -advantage * 4 / tau / (1 + math.exp(-tau * 0.5))

    assert losses[None].item() == pytest.approx(hand(default_tau), rel=1e-6)
    assert losses[3.0].item() == pytest.approx(hand(3.0), rel=1e-6)
    assert abs(hand(3.0) - hand(default_tau)) > 0.1


# ---------------------------------------------------------------- trainer.total_epochs


@pytest.mark.parametrize("epochs", [1, 2])
def test_total_epochs_sets_how_many_passes_fit_makes(tmp_path, epochs):
    # 6 prompts, batches of 2: 3 steps an epoch; without total_training_steps the run is total_epochs long
    trainer = make_trainer(str(tmp_path / "run"), total_steps="null", save_freq=-1, total_epochs=epochs)
    assert trainer.total_training_steps == 3 * epochs
    assert trainer.config.actor_rollout_ref.actor.optim.total_training_steps == 3 * epochs  # the LR horizon
    trainer.fit()
    assert [step for step, _ in trainer.seen] == list(range(1, 3 * epochs + 1))
    for epoch in range(epochs):  # each epoch sees every prompt once
        rows = [i for _, batch in trainer.seen[3 * epoch:3 * epoch + 3] for i in batch]
        assert sorted(rows) == sorted(row["idx"] for row in DATASET)


# ---------------------------------------------------------------- rollout.disable_log_stats


def test_disable_log_stats_reaches_the_vllm_engine(monkeypatch):
    from tests.workers.rollout.test_vllm_parts import SMOL
    from verl.workers.rollout.vllm import engine as engine_mod

    monkeypatch.setattr(engine_mod, "_total_memory_bytes", lambda: 16 * 2**30)
    for value in (True, False):
        rollout = typed(f"{ARR}.rollout.disable_log_stats={value}").actor_rollout_ref.rollout
        assert engine_mod.engine_kwargs(rollout, "/m", SMOL, seed=0, engines_per_node=1)["disable_log_stats"] is value


# ---------------------------------------------------------------- actor / critic checkpoint.load_contents


def _role_state(worker, prefix: str, trained: bool) -> None:
    """The tiny Llama with its Adam optimizer and LR schedule, installed as the worker's role state; `trained`:
    one optimizer and one scheduler step behind them (else freshly built)."""
    from tests.helpers.tiny_model import tiny_llama

    module = tiny_llama()
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    if trained:
        module(torch.tensor([[3, 4, 5]])).logits.sum().backward()
        optimizer.step()
        scheduler.step()
    setattr(worker, f"{prefix}_module", module)
    setattr(worker, f"{prefix}_optimizer", optimizer)
    setattr(worker, f"{prefix}_lr_scheduler", scheduler)


def _resume(role: str, load_contents: str | None, ckpt: str) -> dict:
    """Save a trained role through its worker, load it into a fresh one configured with `load_contents`; report
    what came back."""
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    key = f"{ARR}.actor.checkpoint.load_contents" if role == "actor" else "critic.checkpoint.load_contents"
    overrides = ["critic.model.tokenizer_path=null", *([] if load_contents is None else [f"{key}={load_contents}"])]

    def worker(trained: bool):
        config = typed(*overrides)
        if role == "actor":
            made = ActorRolloutRefWorker(config.actor_rollout_ref, "actor")
            made.tokenizer = None
            _role_state(made, "actor", trained)
            return made, made.actor_module, made.actor_optimizer, made.actor_lr_scheduler
        made = CriticWorker(config.critic)
        made._cfg = config.critic
        _role_state(made, "critic", trained)
        return made, made.critic_module, made.critic_optimizer, made.critic_lr_scheduler

    saved, saved_module, _, _ = worker(trained=True)
    if not os.path.exists(ckpt):
        saved.save_checkpoint(ckpt, None, 1, None)
    fresh, module, optimizer, scheduler = worker(trained=False)
    fresh.load_checkpoint(ckpt)
    weights = all(torch.equal(a, b) for a, b in zip(module.parameters(), saved_module.parameters()))
    return {"weights": weights, "optimizer": bool(optimizer.state), "scheduler_epoch": scheduler.last_epoch}


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_checkpoint_load_contents_picks_what_a_resume_restores(tmp_path, role):
    ckpt = str(tmp_path / "ckpt")
    # the default (everything saved): weights, Adam's moments and the schedule's step all come back
    assert _resume(role, None, ckpt) == {"weights": True, "optimizer": True, "scheduler_epoch": 1}
    assert _resume(role, "[model]", ckpt) == {"weights": True, "optimizer": False, "scheduler_epoch": 0}
    assert _resume(role, "[optimizer,extra]", ckpt) == {"weights": False, "optimizer": True, "scheduler_epoch": 1}


# ---------------------------------------------------------------- fsdp_config.model_dtype / reshard_after_forward


_SECTIONS = {"actor": f"{ARR}.actor.fsdp_config", "ref": f"{ARR}.ref.fsdp_config", "critic": "critic.model.fsdp_config"}


def _fsdp_workers(rank: int, port: int, model_dir: str, results) -> None:
    """Builds the actor, the reference and the critic worker on one gloo rank, once with each section's defaults
    and once with model_dtype=bf16 and reshard_after_forward=false; reports each module's parameter dtypes and
    whether a decoder layer still holds its gathered (unsharded) weights after a forward."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # the perf probe is not what is tested here
    try:
        for changed in (False, True):
            overrides = [f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", "critic.model.tokenizer_path=null"]
            if changed:
                overrides += [f"{s}.{k}" for s in _SECTIONS.values()
                              for k in ("model_dtype=bf16", "reshard_after_forward=false")]
            config = typed(*overrides)
            actor = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor")
            actor.init_model()
            ref = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "ref")
            ref.init_model()
            critic = fsdp_workers.CriticWorker(config.critic)
            critic.init_model()
            entry = {}
            for name, module in (("actor", actor.actor_module), ("ref", ref.ref_module),
                                 ("critic", critic.critic_module)):
                # the stored (sharded) weights, before a forward swaps in the compute copies in
                # mixed_precision.param_dtype (fp32 by default)
                dtypes = sorted({str(p.dtype) for p in module.parameters()})
                with torch.enable_grad():
                    out = module(torch.tensor([[3, 4, 5]]))
                    weight = module.model.layers[0].self_attn.q_proj.weight
                    gathered = not isinstance(weight, DTensor)
                    if out.logits.requires_grad:
                        out.logits.float().sum().backward()  # completes FSDP's step, which reshards
                entry[name] = {"dtypes": dtypes, "gathered": gathered}
            results[changed] = entry
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
def test_model_dtype_and_reshard_after_forward_shape_each_workers_module(model_dir):
    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_fsdp_workers, free_port(), model_dir, nprocs=1, timeout_s=220)
    for name in _SECTIONS:
        # defaults: fp32 weights, and each decoder layer frees its gathered weights after forward
        assert results[False][name] == {"dtypes": ["torch.float32"], "gathered": False}, name
        assert results[True][name] == {"dtypes": ["torch.bfloat16"], "gathered": True}, name
