"""Whole `main_ppo` runs for the kill -9 fault cases (tests/e2e/test_faults.py, section `kill -9`): the runs'
overrides (mid-epoch, data.shuffle=true, actor and critic mini-batch shuffling on, so every piece of resumed state
shapes the next step), and the kill/resume choreography on top of tests/e2e/test_checkpoint_resume.py's Driver."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

from tests.e2e.test_checkpoint_resume import (
    Driver,
    _ray_temp_dir,
    assert_matches_uninterrupted,
    metrics_by_step,
    partial_saves,
    tracker,
)
from tests.helpers.e2e import REPO

__all__ = ["KillRuns", "assert_matches_uninterrupted", "tiny_vllm_model_dir"]


def tiny_vllm_model_dir(out: Path) -> Path:
    """The default tokenizer on a 2-layer random Llama with head_dim 32, the smallest vLLM's CPU attention takes."""
    from tests.e2e.test_vllm_sync import _tiny_vllm_model_dir

    return _tiny_vllm_model_dir(out)


def run_overrides(model: Path, data: Path, run_dir: Path, report_dir: Path, *, workers: int, steps: int,
                  vllm: bool) -> list[str]:
    """8 prompts, 2 per step: an epoch is 4 steps, so any resume before step 4 is mid-epoch. Each rank holds 2
    responses and updates on mini-batches of 1 in shuffled order, so the update counters (the shuffle seeds) matter."""
    out = [
        f"data.train_files={data / 'train.parquet'}", "data.val_files=null", "data.shuffle=true",
        "data.train_batch_size=2", "data.max_prompt_length=128", "data.max_response_length=8",
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.n=2",
        "algorithm.adv_estimator=gae", f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.shuffle=true", "critic.shuffle=true", "critic.ppo_mini_batch_size=1",
        "critic.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.actor.optim.lr=1e-2", "critic.optim.lr=1e-2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        f"trainer.n_gpus_per_node={workers}", f"trainer.total_training_steps={steps}", "trainer.save_freq=1",
        "trainer.val_before_train=false", "trainer.logger=[console]", "ray_kwargs.ray_init.num_cpus=4",
        f"trainer.default_local_dir={run_dir}", f"trainer.report_dir={report_dir}",
    ]
    if vllm:
        out += ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.max_num_seqs=16"]
    return out


class KillRuns:
    """Runs of one configuration in ``root``: an uninterrupted reference, and runs killed with kill -9."""

    def __init__(self, root: Path, model: Path, data: Path, *, workers: int, steps: int, vllm: bool) -> None:
        self.root, self.model, self.data = root, model, data
        self.workers, self.steps, self.vllm = workers, steps, vllm

    def start(self, run_dir: Path, name: str) -> tuple[Driver, Path]:
        report = self.root / f"report_{name}"
        shutil.rmtree(report, ignore_errors=True)
        args = run_overrides(self.model, self.data, run_dir, report, workers=self.workers, steps=self.steps,
                             vllm=self.vllm)
        return Driver(args, self.root, name), report

    def uninterrupted(self) -> dict[int, dict]:
        run_dir = self.root / "uninterrupted"
        driver, report = self.start(run_dir, "uninterrupted")
        try:
            driver.wait()
        finally:
            shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
        metrics = metrics_by_step(report)
        assert sorted(metrics) == list(range(1, self.steps + 1)) and tracker(run_dir) == self.steps
        return metrics

    def kill_during_step(self, run_dir: Path, step: int, name: str) -> dict[str, float]:
        """kill -9 the driver at a random moment of ``step`` (>= 3: steps before it are saved, it is not), within
        the first half of the time the step before it took."""
        assert step >= 3, "the step before the killed one times it"
        driver, _ = self.start(run_dir, name)
        t1 = driver.wait_until(lambda: tracker(run_dir) == step - 2, f"checkpoint of step {step - 2}")
        t2 = driver.wait_until(lambda: tracker(run_dir) == step - 1, f"checkpoint of step {step - 1}")
        delay = random.Random(os.urandom(8)).uniform(0.0, 0.5 * (t2 - t1))
        time.sleep(delay)
        driver.kill_driver()
        assert tracker(run_dir) == step - 1, f"step {step} was saved before the kill; the kill was not inside it"
        return {"delay_s": delay, "step_s": t2 - t1, "partial": len(partial_saves(run_dir))}

    def kill_during_save(self, run_dir: Path, name: str) -> int:
        """Resume, then kill -9 the driver while the next step is being saved (a partial folder exists, the
        tracker still names the previous step). Returns the step the tracker names."""
        stale = partial_saves(run_dir)
        before = tracker(run_dir)
        driver, _ = self.start(run_dir, name)
        driver.wait_until(lambda: bool(partial_saves(run_dir) - stale), "a save in progress", poll_s=0.002)
        driver.kill_driver()
        assert tracker(run_dir) == before and partial_saves(run_dir) - stale, "the save finished before the kill"
        return before

    def resume_to_end(self, run_dir: Path, name: str) -> tuple[dict[int, dict], float, float]:
        """Resume and finish; returns the resumed steps' metrics, the seconds until the driver said it resumed and
        until the first resumed step's metrics were written."""
        driver, report = self.start(run_dir, name)
        start = time.monotonic()
        try:
            resumed_at = driver.wait_until(lambda: "resumed from" in driver.log_path.read_text(errors="replace"),
                                           "the resume", poll_s=0.05)
            first_step = driver.wait_until(lambda: bool(_steps_logged(report)), "a resumed step", poll_s=0.05)
            driver.wait()
        finally:
            shutil.rmtree(_ray_temp_dir(run_dir), ignore_errors=True)
        assert not partial_saves(run_dir), "partial saves were not cleaned up"
        assert tracker(run_dir) == self.steps
        return metrics_by_step(report), resumed_at - start, first_step - start


def _steps_logged(report: Path) -> set[int]:
    try:
        return set(metrics_by_step(report))
    except (OSError, ValueError):  # not written yet, or a line being written
        return set()

