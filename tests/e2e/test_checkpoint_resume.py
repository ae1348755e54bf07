"""Whole runs of `python -m verl.trainer.main_ppo` (PPO with a critic, 2 FSDP ranks, tiny model) that are stopped and
resumed: the resumed steps must reproduce the uninterrupted run's metrics exactly.

4 prompts, 2 per step: every epoch is 2 steps, so resuming after step 2 resumes at an epoch boundary. Each run is
its own process session; a killed driver's Ray processes (same session) are killed too, and only those.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, make_arithmetic_data, make_tiny_model_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

RUN_TIMEOUT_S = 400
IGNORED_PREFIXES = ("timing_s/", "timing_per_token_ms/", "perf/")  # wall-clock numbers differ run to run


# -- running and killing drivers ------------------------------------------------------------------------------------


def _session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of a session: the driver we started and everything it spawned."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            members.append(int(entry))
    return members


class Driver:
    """One `main_ppo` process in its own session (sid = its pid), so its whole process tree can be found later."""

    def __init__(self, overrides: list[str], workdir: Path, name: str) -> None:
        self.log_path = workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # never join someone else's cluster
        env.update(VERL_PROGRESS="0", PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], cwd=workdir,
                                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait(self, timeout: float = RUN_TIMEOUT_S) -> None:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise AssertionError(f"run did not finish in {timeout}s:\n{self.log_tail()}") from None
        finally:
            self.kill_all()  # Ray helpers that outlive a finished driver
        assert code == 0, f"run failed (exit {code}):\n{self.log_tail()}"

    def wait_until(self, predicate, what: str, timeout: float = RUN_TIMEOUT_S, poll_s: float = 0.005) -> float:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"run exited (code {self.proc.returncode}) before {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill_all()
                raise AssertionError(f"no {what} within {timeout}s:\n{self.log_tail()}")
            time.sleep(poll_s)
        return time.monotonic()

    def kill_driver(self) -> None:
        """kill -9 the driver alone, as a crash would, then clean up what it leaves behind."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.kill_all()

    def kill_all(self) -> None:
        sid = self.proc.pid
        for _ in range(100):
            members = _session_members(sid)
            if not members:
                break
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.wait()
        assert not _session_members(sid), f"processes of session {sid} survive: {_session_members(sid)}"


# -- the runs -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt_e2e")
    return {"root": root, "model": make_tiny_model_dir(root / "model"),
            "data": make_arithmetic_data(root / "data", train_size=4, test_size=2)}


def overrides(assets: dict[str, Path], run_dir: Path, report_dir: Path, workers: int = 2) -> list[str]:
    return [
        f"data.train_files={assets['data'] / 'train.parquet'}", "data.val_files=null",
        "data.train_batch_size=2", "data.max_prompt_length=128", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets['model']}", "actor_rollout_ref.rollout.n=2",
        "algorithm.adv_estimator=gae", f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-2", "critic.optim.lr=1e-2", "critic.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        f"trainer.n_gpus_per_node={workers}", "trainer.total_epochs=2", "trainer.save_freq=1",
        "trainer.val_before_train=false", "trainer.logger=[console]", "ray_kwargs.ray_init.num_cpus=4",
        f"trainer.default_local_dir={run_dir}", f"trainer.report_dir={report_dir}",
    ]


def _ray_temp_dir(run_dir: Path) -> str:
    from verl.utils.ray_utils import ray_temp_dir

    return ray_temp_dir(str(run_dir))


def run(assets, run_dir: Path, name: str, workers: int = 2, extra: tuple[str, ...] = ()) -> tuple[Driver, Path]:
    report = assets["root"] / f"report_{name}"
    return Driver([*overrides(assets, run_dir, report, workers), *extra], assets["root"], name), report


def metrics_by_step(report_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (report_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "actor/pg_loss" in r}


def max_abs_diff(a: dict, b: dict) -> tuple[float, str]:
    keys = [k for k in a if isinstance(a[k], (int, float)) and not k.startswith(IGNORED_PREFIXES)]
    missing = [k for k in keys if k not in b]
    assert not missing, f"resumed run lacks {missing}"
    return max(((abs(a[k] - b[k]), k) for k in keys), default=(0.0, ""))


def tracker(run_dir: Path) -> int | None:
    path = run_dir / "latest_checkpointed_iteration.txt"
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def partial_saves(run_dir: Path) -> set[str]:
    return {p.name for p in run_dir.glob("global_step_*.tmp-*")} if run_dir.exists() else set()


def assert_matches_uninterrupted(reference: dict[int, dict], resumed: dict[int, dict], steps: list[int], label: str):
    assert sorted(resumed) == steps, f"{label}: the resumed run trained steps {sorted(resumed)}, expected {steps}"
    for step in steps:
        diff, key = max_abs_diff(reference[step], resumed[step])
        compared = sum(1 for k, v in reference[step].items()
                       if isinstance(v, (int, float)) and not k.startswith(IGNORED_PREFIXES))
        print(f"{label}: step {step}: max |metric diff| vs the uninterrupted run = {diff} over {compared} metrics")
        assert diff == 0.0, f"{label}: step {step} differs from the uninterrupted run in {key} by {diff}"


@pytest.fixture(scope="module")
def uninterrupted(assets):
    run_dir = assets["root"] / "uninterrupted"
    driver, report = run(assets, run_dir, "uninterrupted")
    try:
        driver.wait()
    finally:
        shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
    metrics = metrics_by_step(report)
    assert sorted(metrics) == [1, 2, 3, 4] and tracker(run_dir) == 4
    return run_dir, metrics


def _copy_checkpoint(src_run: Path, step: int, dst_run: Path) -> None:
    dst_run.mkdir(parents=True)
    shutil.copytree(src_run / f"global_step_{step}", dst_run / f"global_step_{step}")
    (dst_run / "latest_checkpointed_iteration.txt").write_text(str(step))


# -- tests ----------------------------------------------------------------------------------------------------------


def test_resume_after_an_epoch_matches_the_uninterrupted_run(assets, uninterrupted, tmp_path):
    """Resume from step 2 (the end of epoch 1): steps 3-4 (epoch 2) are bitwise the uninterrupted ones; the merged
    final actor loads in HF."""
    from transformers import AutoModelForCausalLM

    from verl.model_merger.__main__ import main as merge

    reference_dir, reference = uninterrupted
    run_dir = tmp_path / "resumed"
    _copy_checkpoint(reference_dir, 2, run_dir)
    driver, report = run(assets, run_dir, "resumed_after_epoch")
    try:
        driver.wait()
    finally:
        shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
    assert "resumed from" in driver.log_path.read_text()
    assert_matches_uninterrupted(reference, metrics_by_step(report), [3, 4], "resume at the epoch boundary")

    target = tmp_path / "merged"
    merge(["merge", "--backend", "fsdp", "--local_dir", str(reference_dir / "global_step_4" / "actor"),
           "--target_dir", str(target)])
    merged = AutoModelForCausalLM.from_pretrained(target)
    initial = AutoModelForCausalLM.from_pretrained(assets["model"])
    change = (merged.model.norm.weight - initial.model.norm.weight).abs().max().item()
    assert change > 0, "the merged actor has the initial weights"


@pytest.mark.slow
def test_kill_9_during_step_3_and_during_a_save_then_resume(assets, uninterrupted, tmp_path):
    """Run from scratch and kill -9 the driver at a random moment of step 3; resume and kill it while it saves;
    resume again: steps 3-4 equal the uninterrupted run's."""
    _, reference = uninterrupted
    run_dir = tmp_path / "killed"
    try:
        # 1. a random moment of step 3 (steps 1 and 2 were saved; the tracker says 2 until step 3's save is done)
        driver, _ = run(assets, run_dir, "kill_in_step3")
        t1 = driver.wait_until(lambda: tracker(run_dir) == 1, "checkpoint of step 1")
        t2 = driver.wait_until(lambda: tracker(run_dir) == 2, "checkpoint of step 2")
        delay = random.Random(os.urandom(8)).uniform(0.0, 0.6 * (t2 - t1))
        time.sleep(delay)
        driver.kill_driver()
        print(f"killed the driver {delay:.3f}s into step 3 (step 2 + its save took {t2 - t1:.3f}s); "
              f"tracker={tracker(run_dir)}, partial saves left: {sorted(partial_saves(run_dir))}")
        assert tracker(run_dir) == 2, "step 3 finished before the kill; the kill point was not inside step 3"

        # 2. resume, and kill while step 3 is being saved (a new partial folder exists, the tracker still says 2)
        stale = partial_saves(run_dir)
        driver, _ = run(assets, run_dir, "kill_in_save")
        driver.wait_until(lambda: bool(partial_saves(run_dir) - stale), "a save in progress")
        driver.kill_driver()
        left = partial_saves(run_dir) - stale
        print(f"killed the driver during a save: tracker={tracker(run_dir)}, partial folders {sorted(left)}")
        assert tracker(run_dir) == 2 and left, "the save finished before the kill"

        # 3. resume to the end
        driver, report = run(assets, run_dir, "final_resume")
        driver.wait()
    finally:
        shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
    assert not partial_saves(run_dir), "partial saves were not cleaned up"
    assert tracker(run_dir) == 4
    assert_matches_uninterrupted(reference, metrics_by_step(report), [3, 4], "after two kill -9")


@pytest.mark.slow
def test_resume_with_another_world_size_reshards(assets, uninterrupted, tmp_path):
    """The 2-rank checkpoint of step 2 resumes on 1 rank: weights and optimizer are resharded and training goes on
    (the sampling RNG streams differ, so the metrics are not expected to match)."""
    reference_dir, reference = uninterrupted
    run_dir = tmp_path / "one_rank"
    _copy_checkpoint(reference_dir, 2, run_dir)
    # another world size is another run identity: resume_mode=auto refuses it, loading it on purpose is accepted
    # with a warning (tests/e2e/test_faults.py has the refusal)
    driver, report = run(assets, run_dir, "one_rank", workers=1,
                         extra=("trainer.resume_mode=resume_path",
                                f"trainer.resume_from_path={run_dir / 'global_step_2'}"))
    try:
        driver.wait()
    finally:
        shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
    assert "written by 2 workers, this run has 1" in driver.log_path.read_text()
    metrics = metrics_by_step(report)
    assert sorted(metrics) == [3, 4]
    for step, row in metrics.items():
        assert math.isfinite(row["actor/pg_loss"]) and math.isfinite(row["critic/vf_loss"])
        # one rank logs no global_seqlen/* (nothing to balance across ranks): compare what both runs log
        diff, key = max_abs_diff({k: v for k, v in reference[step].items() if k in row}, row)
        print(f"1 rank vs 2 ranks, step {step}: max |metric diff| {diff:.3g} ({key})")
