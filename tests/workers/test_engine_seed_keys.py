"""Upstream's engine keys fsdp_config.seed / full_determinism / dtype (actor, reference, critic, reward model),
and the role keys data_loader_seed (actor, critic), calculate_entropy and loss_scale_factor (actor).

The worker tests build each role's worker on one gloo rank, as the trainer's Ray workers do, and read what the
key changed in that process: the critic's freshly initialised value head, the random stream the worker leaves
for sampling, torch's deterministic mode, the dtype the actor computes in."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.helpers.determinism import restored_determinism
from tests.helpers.tiny_model import tiny_llama
from tests.trainer.config import test_key_effects
from tests.trainer.config.test_key_effects import problems, typed
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl import algos
from verl.protocol import DataProto
from verl.utils.determinism import enable_full_determinism, seed_everything
from verl.workers.actor import DataParallelPPOActor
from verl.workers.config import FSDPEngineConfig
from verl.workers.fsdp_utils import mixed_precision_policy
from verl.workers.update_loop import enumerate_mini_batches, shuffle_seed

ARR = "actor_rollout_ref"
model_dir = test_key_effects.model_dir  # the tiny HF model folder fixture, shared rather than rebuilt
ENGINES = [f"{ARR}.actor.fsdp_config", f"{ARR}.ref.fsdp_config", "critic.model.fsdp_config",
           "reward_model.model.fsdp_config"]


# ---------------------------------------------------------------- seed / full_determinism: the functions


def _draws() -> list:
    import random

    import numpy as np

    return [random.random(), float(np.random.rand()), torch.rand(2).tolist(),
            torch.nn.functional.dropout(torch.ones(8), 0.5).tolist()]


def test_seed_everything_repeats_every_generator_and_dropout():
    seed_everything(11)
    first = _draws()
    seed_everything(11)
    assert _draws() == first
    seed_everything(12)
    assert _draws() != first


@pytest.fixture
def restore_determinism():
    with restored_determinism(("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "NCCL_DETERMINISTIC",
                               "FLASH_ATTENTION_DETERMINISTIC")):
        yield


def test_enable_full_determinism_turns_on_torchs_deterministic_mode(restore_determinism):
    torch.use_deterministic_algorithms(False)
    enable_full_determinism(5)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8" and os.environ["PYTHONHASHSEED"] == "5"
    first = _draws()
    enable_full_determinism(5)
    assert _draws() == first  # seeded as seed_everything(5)


# ---------------------------------------------------------------- seed / full_determinism / dtype: the workers


def _worker_keys(rank: int, port: int, model_dir: str, rm_dir: str, results) -> None:
    import torch.distributed as dist

    from tests.helpers.typed_config import typed_section
    from verl.trainer.config.reward import RewardModelConfig
    from verl.workers import fsdp_workers
    from verl.workers.reward_model_worker import RewardModelWorker

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # the perf probe is not what is tested here
    paths = [f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", "critic.model.tokenizer_path=null"]

    def deterministic() -> bool:
        on = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(False)  # the next build starts without it
        return on

    def actor(role: str, *overrides: str):
        worker = fsdp_workers.ActorRolloutRefWorker(typed(*paths, *overrides).actor_rollout_ref, role)
        worker.init_model()
        return worker

    def critic_head(*overrides: str) -> list:
        worker = fsdp_workers.CriticWorker(typed(*paths, *overrides).critic)
        worker.init_model()
        weight = worker.critic_module.score.weight
        return [weight.full_tensor().tolist(), deterministic()]

    def reward_model(**values):
        worker = RewardModelWorker(typed_section(RewardModelConfig, {"enable": True, "model.path": rm_dir}, **values))
        worker.init_model()
        return [torch.rand(3).tolist(), deterministic()]

    try:
        torch.use_deterministic_algorithms(False)
        out = {}
        key = f"{ARR}.actor.fsdp_config"
        for name, seed in (("actor_a", 3), ("actor_b", 3), ("actor_c", 4)):
            actor("actor", f"{key}.seed={seed}")
            out[name] = [torch.rand(3).tolist(), deterministic()]
        actor("actor", f"{key}.full_determinism=true")
        out["actor_deterministic"] = deterministic()
        actor("ref", f"{ARR}.ref.fsdp_config.seed=9")
        out["ref_a"] = torch.rand(3).tolist()
        actor("ref", f"{ARR}.ref.fsdp_config.seed=9")
        out["ref_b"] = torch.rand(3).tolist()
        out["ref_default_deterministic"] = deterministic()
        actor("ref", f"{ARR}.ref.fsdp_config.full_determinism=true")
        out["ref_deterministic"] = deterministic()
        critic = "critic.model.fsdp_config"
        out["critic"] = [critic_head(f"{critic}.seed=7"), critic_head(f"{critic}.seed=7"), critic_head(f"{critic}.seed=8"),
                         critic_head(f"{critic}.full_determinism=true")]
        rm = "model.fsdp_config"
        out["rm"] = [reward_model(**{f"{rm}.seed": 5}), reward_model(**{f"{rm}.seed": 5}),
                     reward_model(**{f"{rm}.seed": 6}), reward_model(**{f"{rm}.full_determinism": True})]
        # dtype: the actor's FSDP compute dtype, as mixed_precision.param_dtype
        for dtype in ("float32", "bfloat16"):
            worker = actor("actor", f"{key}.dtype={dtype}")
            with torch.no_grad():
                out[f"logits_{dtype}"] = str(worker.actor_module(torch.tensor([[3, 4, 5]])).logits.dtype)
        results.update(out)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_seed_full_determinism_and_dtype_act_in_each_roles_worker(model_dir, tmp_path):
    from tests.helpers.ranks import free_port, run_ranks
    from tests.workers.reward_model.rm_fixtures import make_tiny_rm_dir

    rm_dir = str(make_tiny_rm_dir(tmp_path / "rm"))
    got = run_ranks(_worker_keys, free_port(), model_dir, rm_dir, nprocs=1, timeout_s=280)
    # the actor's seed (+ its rank) is the stream its sampling draws from after the build
    assert got["actor_a"] == got["actor_b"] and got["actor_a"][0] != got["actor_c"][0]
    assert got["actor_a"][1] is False and got["actor_deterministic"] is True
    assert got["ref_a"] == got["ref_b"] and got["ref_a"] != got["actor_a"][0]
    assert got["ref_default_deterministic"] is False and got["ref_deterministic"] is True
    # the critic's value head is freshly initialised from its seed: same seed, same head
    (a, _), (b, _), (c, _), (_, critic_det) = got["critic"]
    assert a == b and a != c and got["critic"][0][1] is False and critic_det is True
    rm = got["rm"]
    assert rm[0] == rm[1] and rm[0][0] != rm[2][0] and rm[0][1] is False and rm[3][1] is True
    assert (got["logits_float32"], got["logits_bfloat16"]) == ("torch.float32", "torch.bfloat16")


@pytest.mark.parametrize("section", ENGINES)
def test_dtype_is_the_mixed_precision_param_dtype(section):
    def engine(*overrides: str) -> FSDPEngineConfig:
        config = typed("reward_model.enable=true", "reward_model.model.path=/nonexistent",
                       *(f"{section}.{o}" for o in overrides))
        node = config
        for part in section.split("."):
            node = getattr(node, part)
        return node

    for dtype, want in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("fp32", torch.float32)):
        built = engine(f"dtype={dtype}")
        assert built.mixed_precision.param_dtype == dtype
        assert mixed_precision_policy(built, warn=False).param_dtype == want
    # upstream's name and ours are one setting: either given applies to both, agreeing values are fine
    assert engine("mixed_precision.param_dtype=bf16").dtype == "bf16"
    assert engine("dtype=bfloat16", "mixed_precision.param_dtype=bf16").mixed_precision.param_dtype == "bf16"
    (problem,) = problems("reward_model.enable=true", "reward_model.model.path=/nonexistent",
                          f"{section}.dtype=bfloat16", f"{section}.mixed_precision.param_dtype=fp32")
    assert f"{section}" in problem and "mixed_precision.param_dtype" in problem and "dtype=bfloat16" in problem


def test_dtype_null_is_the_hardwares_dtype():
    from verl.utils.device import hardware_compute_dtype
    from verl.workers.fsdp_utils import to_torch_dtype

    built = FSDPEngineConfig()
    assert built.dtype is None and built.mixed_precision.param_dtype is None
    want = to_torch_dtype(hardware_compute_dtype()[0], "dtype")
    assert mixed_precision_policy(built, warn=False).param_dtype == want


# ---------------------------------------------------------------- data_loader_seed


def _orders(seed: int | None, updates: int = 2) -> list[list[int]]:
    data = DataProto.from_dict({"row": torch.arange(8)})
    return [[int(r) for _, _, mini in enumerate_mini_batches(data, 4, 1, True, shuffle_seed(seed, n))
             for r in mini.batch["row"]] for n in range(updates)]


def test_data_loader_seed_seeds_the_mini_batch_shuffle():
    assert _orders(42) == _orders(42)  # reproducible
    assert _orders(42) != _orders(7)  # the seed picks the orders
    first, second = _orders(42)
    assert first != second and sorted(first) == list(range(8))  # each update draws its own permutation


def _update_orders(monkeypatch, role: str, seed: int) -> list[tuple[int, list[int]]]:
    """Two updates of the role with shuffle=true and data_loader_seed=seed: per update, the shuffle's seed and the
    order the mini-batch loop handed out the rows (told apart by their first response token)."""
    from verl.workers import update_loop

    seen = []

    def spy(data, mini_batch_size, epochs, shuffle, shuffle_seed_value):
        rows = [mini for _, _, mini in enumerate_mini_batches(data, mini_batch_size, epochs, shuffle,
                                                              shuffle_seed_value)]
        seen.append((shuffle_seed_value, [int(t) for mini in rows for t in mini.batch["responses"][:, 0]]))
        yield from ((0, i, mini) for i, mini in enumerate(rows))

    monkeypatch.setattr(update_loop, "enumerate_mini_batches", spy)
    if role == "actor":
        model = tiny_llama()
        data = training_batch(model)
        data.batch["responses"][:, 0] = torch.arange(len(data))  # a row id (the log-probs are not what is read)
        worker = DataParallelPPOActor(actor_config(shuffle=True, ppo_mini_batch_size=2, data_loader_seed=seed), model,
                                      torch.optim.SGD(model.parameters(), lr=0.0))
        for _ in range(2):
            worker.update_policy(data)
    else:
        from tests.workers.critic.test_dp_critic import _training_data, critic_config, tiny_critic
        from verl.workers.critic import DataParallelPPOCritic

        model = tiny_critic()
        data = _training_data(model)
        data.batch["responses"][:, 0] = torch.arange(len(data))
        worker = DataParallelPPOCritic(critic_config(shuffle=True, ppo_mini_batch_size=2, data_loader_seed=seed), model,
                                       torch.optim.SGD(model.parameters(), lr=0.0))
        for _ in range(2):
            worker.update_critic(data)
    return seen


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_the_roles_update_shuffles_with_its_data_loader_seed(monkeypatch, role):
    first = _update_orders(monkeypatch, role, 5)
    assert [s for s, _ in first] == [shuffle_seed(5, 0), shuffle_seed(5, 1)]  # the seed mixed with the update count
    assert _update_orders(monkeypatch, role, 5) == first  # the same seed repeats the orders
    orders = {role_seed: [order for _, order in _update_orders(monkeypatch, role, role_seed)] for role_seed in range(6)}
    assert len({tuple(map(tuple, o)) for o in orders.values()}) > 1  # other seeds, other orders
    assert all(sorted(order) == [0, 1, 2, 3] for o in orders.values() for order in o)


# ---------------------------------------------------------------- calculate_entropy


def test_calculate_entropy_reports_the_entropy_and_leaves_the_update_alone():
    model = tiny_llama()
    data = training_batch(model, temperature=1.0)
    results = {}
    for flag in (False, True):
        trained = copy.deepcopy(model)
        actor = DataParallelPPOActor(actor_config(calculate_entropy=flag), trained,
                                     torch.optim.SGD(trained.parameters(), lr=0.5))
        metrics = actor.update_policy(data)
        results[flag] = (dict(trained.named_parameters()), metrics.get("actor/entropy"))
    assert results[False][1] is None
    # the metric is the token-mean entropy of the policy before the step (one mini-batch of 4: two micro-batches)
    actor = DataParallelPPOActor(actor_config(), copy.deepcopy(model))
    _, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    mask = data.batch["response_mask"]
    micro = [algos.agg_loss(entropy[i:i + 2], mask[i:i + 2], "token-mean").item() for i in (0, 2)]
    assert results[True][1] == pytest.approx(micro, abs=1e-5)
    assert all(torch.equal(results[False][0][k], results[True][0][k]) for k in results[False][0])


# ---------------------------------------------------------------- loss_scale_factor


def test_loss_scale_factor_is_seq_mean_token_sum_norms_divisor():
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    log_prob = torch.zeros(2, 3)  # ratio 1: each token's loss is -advantage
    advantages = torch.tensor([[1.0, 2.0, 5.0], [3.0, 5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])

    def loss(**cfg) -> float:
        config = actor_config(loss_agg_mode="seq-mean-token-sum-norm", **cfg)
        value, _ = get_policy_loss_fn("vanilla")(old_log_prob=log_prob, log_prob=log_prob, advantages=advantages,
                                                 response_mask=mask, loss_agg_mode=config.loss_agg_mode, config=config)
        return float(value)

    # sequence sums -(1 + 2) and -3, their mean -3, divided by the factor (null: the padded length 3)
    assert loss() == pytest.approx(-3 / 3)
    assert loss(loss_scale_factor=4.0) == pytest.approx(-3 / 4)
    assert loss(loss_scale_factor=0.5) == pytest.approx(-3 / 0.5)


def test_loss_scale_factor_reaches_the_actors_update():
    model = tiny_llama()
    data = training_batch(model, temperature=1.0)
    losses = {}
    for factor in (None, 100.0):
        trained = copy.deepcopy(model)
        actor = DataParallelPPOActor(actor_config(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=factor),
                                     trained, torch.optim.SGD(trained.parameters(), lr=0.0))
        losses[factor] = actor.update_policy(data)["actor/pg_loss"]
    width = data.batch["responses"].shape[-1]  # the default divisor: the padded response length
    assert [x * 100.0 / width for x in losses[100.0]] == pytest.approx(losses[None], rel=1e-4)


def test_loss_scale_factor_with_another_mode_is_refused():
    (problem,) = problems(f"{ARR}.actor.loss_scale_factor=4")
    assert "loss_scale_factor" in problem and "seq-mean-token-sum-norm" in problem and "token-mean" in problem
    (problem,) = problems(f"{ARR}.actor.loss_scale_factor=0", f"{ARR}.actor.loss_agg_mode=seq-mean-token-sum-norm")
    assert "loss_scale_factor must be > 0" in problem
