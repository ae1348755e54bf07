"""A whole PPO run across two Ray nodes: `python -m verl.trainer.main_ppo ... trainer.nnodes=2
trainer.n_gpus_per_node=1` joins a cluster started with `ray start --head` / `ray start --address=...` (two raylets on
this machine, 2 CPUs each) through RAY_ADDRESS. Actor, rollout and reference (use_kl_loss) share one process per rank,
the critic (GAE) too; rank 0 runs on one node and rank 1 on the other. The run saves a checkpoint, a second driver
(joined through +ray_kwargs.ray_init.address this time) resumes from it on the same cluster and ends with a
validation score. A third driver asks for trainer.nnodes=3 and must be refused within seconds, naming the pool.
Last, the driver goes through `ray job submit` to a cluster's job server, as docs/scaling.md shows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, make_arithmetic_data, make_tiny_model_dir
from tests.helpers.ray_cluster import RAY_BIN, RayStartCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 500
PLACEMENT_LINE = re.compile(r"\[placement\] pool 'global_pool': 2 rank\(s\) on 2 Ray node\(s\): "
                            r"rank 0 on node (\w+) .*rank 1 on node (\w+) ")


@pytest.fixture(scope="module")
def cluster():
    cluster = RayStartCluster([2, 2], extra_pythonpath=[str(REPO)])
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multinode")
    return {"root": root, "model": make_tiny_model_dir(root / "model"),
            "data": make_arithmetic_data(root / "data", train_size=4, test_size=2)}


def overrides(assets: dict[str, Path], steps: int, nnodes: int = 2) -> list[str]:
    run_dir, data = assets["root"] / "run", assets["data"]
    return [
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=2", "data.max_prompt_length=128", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets['model']}", "actor_rollout_ref.rollout.n=2",
        "algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-2", "critic.optim.lr=1e-2", "critic.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        f"trainer.nnodes={nnodes}", "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1", f"trainer.test_freq={steps}", "trainer.val_before_train=false",
        "trainer.logger=[console]", f"trainer.default_local_dir={run_dir}",
        f"trainer.report_dir={assets['root'] / f'report_{steps}_{nnodes}'}",
    ]


def run_driver(cluster: RayStartCluster, args: list[str], log: Path, timeout: float = RUN_TIMEOUT_S,
               join_by_config: bool = False):
    """join_by_config: the address goes as `+ray_kwargs.ray_init.address=...` instead of RAY_ADDRESS."""
    env = {**cluster.env, "VERL_PROGRESS": "0"}
    if join_by_config:
        args = [*args, f"+ray_kwargs.ray_init.address={cluster.address}"]
    else:
        env["RAY_ADDRESS"] = cluster.address
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], cwd=log.parent, env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    text = log.read_text(errors="replace")
    return proc.returncode, text, time.monotonic() - start


def alive_node_ids(cluster: RayStartCluster) -> list[str]:
    code = ("import ray, json; ray.init(); "
            "print(json.dumps(sorted(n['NodeID'] for n in ray.nodes() if n['Alive'])))")
    env = {**cluster.env, "RAY_ADDRESS": cluster.address}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ranks_on_nodes(log: str) -> tuple[str, str]:
    match = PLACEMENT_LINE.search(log)
    assert match, f"no placement line for 2 ranks on 2 nodes in the log:\n{log[-3000:]}"
    return match.group(1), match.group(2)


def last_val_score(report: Path) -> float:
    rows = [json.loads(line) for line in (report / "metrics.jsonl").read_text().splitlines()]
    scores = [v for r in rows for k, v in r.items() if k.startswith("val-core/") and "/mean@" in k]
    assert scores, "the run logged no validation score"
    return scores[-1]


def test_ppo_across_two_nodes_saves_and_resumes(cluster, assets):
    nodes = alive_node_ids(cluster)
    assert len(nodes) == 2
    print(f"cluster {cluster.address}: Ray nodes {nodes}")

    code, log, wall = run_driver(cluster, overrides(assets, steps=2), assets["root"] / "first.log")
    assert code == 0, f"first run failed (exit {code}):\n{log[-4000:]}"
    first = ranks_on_nodes(log)
    assert first[0] != first[1] and {n[:12] for n in nodes} == set(first), (first, nodes)
    run_dir = assets["root"] / "run"
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    print(f"first run ({wall:.0f}s): ranks on nodes {first}; saved global_step_2")

    code, log, wall = run_driver(cluster, overrides(assets, steps=3), assets["root"] / "resumed.log",
                                 join_by_config=True)
    assert code == 0, f"resumed run failed (exit {code}):\n{log[-4000:]}"
    assert re.search(r"\[checkpoint\] resumed from \S*global_step_2 \(step 2", log), log[-3000:]
    resumed = ranks_on_nodes(log)
    assert set(resumed) == set(first)
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    score = last_val_score(assets["root"] / "report_3_2")
    assert 0.0 <= score <= 1.0
    print(f"resumed run ({wall:.0f}s): ranks on nodes {resumed}; trained step 3; final validation score {score}")


def test_three_nodes_on_a_two_node_cluster_is_refused_quickly(cluster, assets, tmp_path):
    # batch sizes that divide over 3 ranks, so the config is valid and only the placement can fail
    replaced = {"trainer.default_local_dir": str(tmp_path / "run3"), "data.train_batch_size": "3",
                "actor_rollout_ref.actor.ppo_mini_batch_size": "3"}
    args = [a for a in overrides(assets, steps=1, nnodes=3) if a.split("=", 1)[0] not in replaced]
    args += [f"{k}={v}" for k, v in replaced.items()]
    code, log, wall = run_driver(cluster, args, tmp_path / "three.log", timeout=120)
    assert code != 0
    assert re.search(r"resource pool 'global_pool'.*needs 3 distinct Ray nodes.*has 2 alive node", log), log[-3000:]
    print(f"nnodes=3 refused after {wall:.1f}s (driver start included)")


def test_ray_job_submit_runs_the_driver_on_the_cluster(assets, tmp_path):
    job_cluster = RayStartCluster([2, 2], extra_pythonpath=[str(REPO)], job_server=True)
    try:
        replaced = {"trainer.default_local_dir": str(tmp_path / "run"), "trainer.report_dir": str(tmp_path / "report"),
                    "trainer.total_training_steps": "1", "trainer.test_freq": "1"}
        args = [a for a in overrides(assets, steps=1) if a.split("=", 1)[0] not in replaced]
        args += [f"{k}={v}" for k, v in replaced.items()]
        cmd = [str(RAY_BIN), "job", "submit", f"--address={job_cluster.dashboard_url}", "--",
               sys.executable, "-m", "verl.trainer.main_ppo", *args]
        start = time.monotonic()
        proc = subprocess.run(cmd, env=job_cluster.env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        log = proc.stdout + proc.stderr
        assert proc.returncode == 0, log[-4000:]
        assert re.search(r"Job '\w+' succeeded", log), log[-3000:]
        nodes = ranks_on_nodes(log)
        assert nodes[0] != nodes[1]
        assert (tmp_path / "run" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
        print(f"ray job submit ({time.monotonic() - start:.0f}s): ranks on nodes {nodes}; saved global_step_1")
    finally:
        job_cluster.stop()
