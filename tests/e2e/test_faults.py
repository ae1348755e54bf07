"""Fault injection: one section per fault in docs/reliability.md's table. Each case injects the fault, checks that it
surfaces as a named error (or the documented recovery) within its deadline, and that nothing is lost or left
half-written. Fast cases run in `make test`; whole runs that take minutes are marked `slow`.

Sections are owned by the part of the code they exercise; shared helpers live in tests/helpers/.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e]


# == deadlines: a worker that hangs, a worker killed mid-step, non-finite gradients ================================
# (section: deadlines)
# Whole runs on the tiny model (2 ranks, save_freq=1) whose actor worker injects the fault at its 2nd update
# (tests/e2e/fault_workers.py). Each prints "surfaces after" for docs/reliability.md: from the fault's start (the
# worker writes the time to a file) to the driver's exception. A run takes ~15 s on an idle box; the hang waits out
# its 30 s deadline too, so it is the slow one (tests/single_controller/test_deadlines.py hangs light workers fast).


def _run_with_fault(tmp_path, monkeypatch, fault: str, *extra: str):
    """(the exception the run ended with, seconds from the fault's start to it, the run's checkpoint folder)."""
    import os
    import time

    import ray

    import tests.e2e.fault_workers as fault_workers
    from tests.helpers.e2e import REPO, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides
    from verl.single_controller.roles import Role
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo import launcher

    mark = tmp_path / "fault_started"
    monkeypatch.setenv(fault_workers.FAULT_ENV, fault)  # the Ray workers inherit the driver's environment
    monkeypatch.setenv("VERL_TEST_FAULT_MARK", str(mark))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    plain = launcher.role_worker_mapping

    def with_faulty_actor(config):
        mapping, pools = plain(config)
        mapping[Role.ActorRollout] = fault_workers.FaultyActorWorker
        return mapping, pools

    monkeypatch.setattr(launcher, "role_worker_mapping", with_faulty_actor)
    run_dir = tmp_path / "run"
    overrides = tiny_run_overrides(make_tiny_model_dir(tmp_path / "model"), make_arithmetic_data(tmp_path / "data"),
                                   run_dir) + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}", "trainer.total_training_steps=4",
        "trainer.save_freq=1", *extra]
    if ray.is_initialized():
        ray.shutdown()
    try:
        with pytest.raises(Exception) as info:
            launcher.run_training(validate_config(load_config(overrides)))
        surfaced = time.time()
    finally:
        ray.shutdown()
    started = float(mark.read_text().split()[0])
    return info.value, surfaced - started, run_dir


def _assert_step_1_checkpoint_intact(err: BaseException, run_dir) -> None:
    from verl.checkpoint.layout import read_tracker

    notes = "\n".join(getattr(err, "__notes__", []))
    assert f"the last complete checkpoint is {run_dir / 'global_step_1'} (step 1), untouched" in notes
    assert read_tracker(str(run_dir)) == 1 and (run_dir / "global_step_1" / "actor").is_dir()
    assert not [p.name for p in run_dir.iterdir() if ".tmp-" in p.name]  # nothing half-written


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_worker_that_hangs_surfaces_as_a_named_deadline_error(tmp_path, monkeypatch):
    from verl.single_controller.ray import WorkerDeadlineError

    deadline = 30
    err, after, run_dir = _run_with_fault(tmp_path, monkeypatch, "hang_update:2",
                                          f"trainer.worker_call_timeout_s={deadline}",
                                          "trainer.worker_call_timeout_per_sample_s=0")
    print(f"[deadlines] hung worker surfaced after {after:.1f} s (deadline {deadline} s)")
    assert isinstance(err, WorkerDeadlineError), repr(err)
    msg = str(err)
    assert "stage update_actor, method update_actor" in msg and "ranks still running: 0, 1 of 2" in msg
    assert f"trainer.worker_call_timeout_s={deadline}" in msg
    assert deadline - 1 <= after < deadline + 15
    _assert_step_1_checkpoint_intact(err, run_dir)


@pytest.mark.timeout(600)
def test_a_worker_killed_mid_step_surfaces_naming_its_rank_and_method(tmp_path, monkeypatch):
    from verl.single_controller.ray import WorkerDeadlineError, WorkerGroupError

    err, after, run_dir = _run_with_fault(tmp_path, monkeypatch, "kill_update:2")
    print(f"[deadlines] killed worker surfaced after {after:.1f} s")
    assert isinstance(err, WorkerGroupError) and not isinstance(err, WorkerDeadlineError), repr(err)
    msg = str(err)
    assert "worker process died: rank 1 of 2" in msg and "method update_actor" in msg
    assert after < 300  # far below the 1800 s call deadline a missed death would wait for (not a speed check)
    _assert_step_1_checkpoint_intact(err, run_dir)


@pytest.mark.timeout(600)
def test_a_nonfinite_gradient_for_n_steps_stops_the_run_naming_role_step_and_count(tmp_path, monkeypatch):
    from verl.workers.nonfinite_grads import NonFiniteGradError

    err, after, run_dir = _run_with_fault(tmp_path, monkeypatch, "nan_grads:1",
                                          "actor_rollout_ref.actor.max_consecutive_nonfinite_grad_skips=2")
    print(f"[deadlines] non-finite grad norms stopped the run {after:.1f} s after the first")
    assert isinstance(err, NonFiniteGradError), repr(err)
    msg = str(err)
    assert "actor grad norm was nan for 2 consecutive optimizer steps" in msg and "update call 1" in msg
    notes = "\n".join(err.__notes__)
    assert "during training step 2" in notes and "of 2 (worker" in notes and "update_actor" in notes
    _assert_step_1_checkpoint_intact(err, run_dir)


# == reward scoring: a reward function that hangs ===================================================================
# (section: reward)
# The real path the trainer takes, short of a whole run (which costs a minute here): the yaml + override -> typed
# config -> load_reward_manager (a custom_reward_function file, shipped by value to the scoring processes) ->
# compute_reward on a rollout-shaped DataProto -> reward_metrics, the step's reward/timeouts. The scoring pool is
# warmed by a first step, as in a run; "surfaces after" is from the step's start to the warning / the error.

_HANGING_REWARD = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if "apples" in solution_str:
        while True:  # a pathological response: a pure-Python loop no signal handler inside the call can stop
            time.sleep(0)
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0
"""


def _reward_fault_setup(tmp_path, *overrides: str):
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from tests.workers.reward_manager.conftest import make_batch
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.ppo.reward import load_reward_manager

    path = tmp_path / "hanging_reward.py"
    path.write_text(_HANGING_REWARD)
    config = validate_config(load_config([f"custom_reward_function.path={path}", "reward_model.scoring.timeout=2",
                                          *overrides]), check_files=False)
    tokenizer = build_tiny_tokenizer()
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    samples = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11"), ("Ben has 3", "3 apples", "3"),
               ("Eve has 5", "#### 5", "5")]
    hangs, _ = make_batch(tokenizer, samples, data_source=["gsm8k", "gsm8k", "slow/source", "gsm8k"])
    fine, _ = make_batch(tokenizer, [samples[0], samples[1], samples[3]])
    return manager, hangs, fine


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_fault_a_reward_function_that_hangs_scores_zero_and_is_counted(tmp_path, capfd):
    import time

    from verl.trainer.ppo.reward import compute_reward, reward_metrics

    manager, hangs, fine = _reward_fault_setup(tmp_path)
    start = time.monotonic()
    _, extra = compute_reward(fine, manager)  # step 1: starts the pool
    first = time.monotonic() - start
    assert reward_metrics(extra) == {"reward/timeouts": 0.0}
    start = time.monotonic()
    reward, extra = compute_reward(hangs, manager)  # step 2: sample 2 never returns
    seconds = time.monotonic() - start
    assert reward.sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0] and reward_metrics(extra) == {"reward/timeouts": 1.0}
    assert extra["reward_timeout"] == [False, False, True, False]
    assert "sample 2 (data_source='slow/source')" in capfd.readouterr().err
    with capfd.disabled():
        print(f"\n[surfaces after] hanging reward, on_timeout=zero: {seconds:.1f} s (timeout 2 s); "
              f"first step with the pool's start: {first:.2f} s")
    assert seconds < 2 + 10
    pids = manager.scorer._pool.pids
    _, extra = compute_reward(fine, manager)  # step 3: the replaced worker scores again
    assert reward_metrics(extra) == {"reward/timeouts": 0.0}
    manager.close()  # nothing left running: the spinning worker was killed, the others end here
    assert not any(_alive(pid) for pid in pids)


def test_fault_a_reward_function_that_hangs_stops_the_run_under_on_timeout_error(tmp_path):
    import time

    from verl.trainer.ppo.reward import compute_reward
    from verl.workers.reward_manager.timed_scoring import RewardTimeoutError

    manager, hangs, fine = _reward_fault_setup(tmp_path, "reward_model.scoring.on_timeout=error")
    compute_reward(fine, manager)
    start = time.monotonic()
    with pytest.raises(RewardTimeoutError, match=r"sample 2 \(data_source='slow/source'\).*on_timeout=error"):
        compute_reward(hangs, manager)
    seconds = time.monotonic() - start
    print(f"\n[surfaces after] hanging reward, on_timeout=error: {seconds:.1f} s (timeout 2 s)")
    assert seconds < 2 + 10
    manager.close()



# == resume identity and the checkpoint-folder lock: resume with a different model, a second run on one folder ======
# (section: resume identity)
# Each case runs the real entry (`python -m verl.trainer.main_ppo`) against a checkpoint folder prepared on disk: the
# run identity is the one the trainer records (resume_guard.run_identity), so no training run is needed to write it.


def _identity_overrides(tmp_path, model_dir) -> list[str]:
    from tests.helpers.e2e import make_arithmetic_data, tiny_run_overrides

    data = tmp_path / "data"
    if not (data / "train.parquet").exists():
        make_arithmetic_data(data, train_size=8, test_size=4)
    return tiny_run_overrides(model_dir, data, tmp_path / "run")


def _checkpoint_written_by(tmp_path, overrides: list[str], step: int) -> dict[str, int]:
    """A published `global_step_<step>` carrying the identity of the run `overrides` describe; returns the folder's
    files with their mtimes (to show that nothing was touched)."""
    import os

    from verl.checkpoint.identity import write_identity
    from verl.checkpoint.layout import step_dir, write_tracker
    from verl.trainer.config import load_config, validate_config
    from verl.trainer.ppo.resume_guard import run_identity

    root = tmp_path / "run"
    folder = step_dir(str(root), step)
    os.makedirs(os.path.join(folder, "actor"))
    write_identity(folder, run_identity(validate_config(load_config(overrides))))
    write_tracker(str(root), step)
    return _snapshot(root)


def _snapshot(root) -> dict[str, int]:
    import os

    return {os.path.relpath(os.path.join(d, n), root): os.stat(os.path.join(d, n)).st_mtime_ns
            for d, _dirs, files in os.walk(root) for n in files}


def _main_ppo(overrides: list[str], timeout: int = 120) -> tuple[int, str, float]:
    import os
    import subprocess
    import sys
    import time

    from tests.helpers.e2e import REPO

    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], cwd=REPO,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    print(f"surfaced after {seconds:.1f} s")  # the figure docs/reliability.md quotes (pytest -s shows it)
    return result.returncode, result.stdout + result.stderr, seconds


def test_fault_resume_with_a_different_model_is_refused(tmp_path):
    from tests.helpers.e2e import default_tokenizer_dir, make_tiny_model_dir

    first = default_tokenizer_dir()
    before = _checkpoint_written_by(tmp_path, _identity_overrides(tmp_path, first), step=1)
    other = make_tiny_model_dir(tmp_path / "other_model")
    code, output, seconds = _main_ppo(_identity_overrides(tmp_path, other))
    assert code == 2, output[-3000:]
    assert "Refused to start:" in output and "Traceback" not in output, output[-3000:]
    assert "refusing to resume" in output and "global_step_1" in output
    assert f"actor_rollout_ref.model.path config.json: {first} (sha256" in output
    assert f"-> {other} (sha256" in output and "actor_rollout_ref.model.path weights:" in output
    assert "trainer.resume_mode=resume_path" in output and "trainer.experiment_name=" in output
    assert "Ray" not in output and _snapshot(tmp_path / "run") == before  # before Ray; the checkpoint untouched
    assert seconds < 60


def test_fault_second_run_on_the_same_checkpoint_folder_is_refused(tmp_path):
    import socket
    import subprocess
    import sys

    from tests.helpers.e2e import default_tokenizer_dir

    overrides = _identity_overrides(tmp_path, default_tokenizer_dir())
    holder_code = ("import sys, time; from verl.checkpoint.lock import CheckpointDirLock; "
                   "CheckpointDirLock(sys.argv[1]).acquire(); print('holding', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", holder_code, str(tmp_path / "run")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        before = _snapshot(tmp_path / "run")
        code, output, seconds = _main_ppo(overrides)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2, output[-3000:]
    assert "Refused to start:" in output and "is in use by another run" in output, output[-3000:]
    assert f"pid {holder.pid} on host {socket.gethostname()}" in output
    assert "Ray" not in output and _snapshot(tmp_path / "run") == before  # nothing written into the holder's folder
    assert seconds < 60


def test_fault_finished_run_resumed_again_does_nothing(tmp_path):
    from tests.helpers.e2e import default_tokenizer_dir

    overrides = _identity_overrides(tmp_path, default_tokenizer_dir())  # trainer.total_training_steps=2
    before = _checkpoint_written_by(tmp_path, overrides, step=2)
    code, output, seconds = _main_ppo(overrides)
    assert code == 0, output[-3000:]
    assert "run already finished at step 2/2; nothing to do" in output
    assert "Ray" not in output and _snapshot(tmp_path / "run") == before  # no workers, no report, no lock file
    assert seconds < 60



# == kill -9 of the driver during a step and during a save (vLLM, 2 ranks, mid-epoch) ===============================
# (section: kill -9)
# Runs of `main_ppo` killed with kill -9 mid-epoch (data.shuffle, actor and critic mini-batch shuffling on) and
# resumed: the resumed steps' metrics must equal an uninterrupted run's exactly. The runs: tests/helpers/kill9.py.


def _kill9_runs(root, *, workers: int, steps: int, vllm: bool):
    from tests.helpers.e2e import make_arithmetic_data, make_tiny_model_dir
    from tests.helpers.kill9 import KillRuns, tiny_vllm_model_dir

    model = tiny_vllm_model_dir(root / "model") if vllm else make_tiny_model_dir(root / "model")
    data = make_arithmetic_data(root / "data", train_size=8, test_size=2)
    return KillRuns(root, model, data, workers=workers, steps=steps, vllm=vllm)


@pytest.mark.timeout(600)
def test_kill_9_of_the_driver_during_a_step_resumes_bit_identically(tmp_path):
    """HF rollout, 2 ranks, 4 steps: kill -9 at a random moment of step 3, resume; steps 3-4 match. Three driver
    starts (reference, killed, resumed) dominate its time."""
    from tests.helpers.kill9 import assert_matches_uninterrupted

    runs = _kill9_runs(tmp_path, workers=2, steps=4, vllm=False)
    reference = runs.uninterrupted()
    run_dir = tmp_path / "killed"
    killed = runs.kill_during_step(run_dir, 3, "killed_in_step3")
    resumed, resume_s, first_step_s = runs.resume_to_end(run_dir, "resumed")
    print(f"kill -9 {killed['delay_s']:.2f}s into step 3 (step 2 took {killed['step_s']:.2f}s, lost at most that); "
          f"restart -> 'resumed from' {resume_s:.1f}s, -> step 3 done again {first_step_s:.1f}s")
    assert_matches_uninterrupted(reference, resumed, [3, 4], "HF, kill -9 in a step")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_9_during_a_step_and_a_save_with_vllm_resumes_bit_identically(tmp_path):
    """vLLM rollout (one in-process engine per rank), 2 ranks, 4 steps: kill -9 at a random moment of step 3,
    resume and kill -9 while step 3 is being saved, resume to the end; steps 3-4 match the uninterrupted run."""
    pytest.importorskip("vllm")
    from tests.helpers.kill9 import assert_matches_uninterrupted

    runs = _kill9_runs(tmp_path, workers=2, steps=4, vllm=True)
    reference = runs.uninterrupted()
    run_dir = tmp_path / "killed"
    killed = runs.kill_during_step(run_dir, 3, "vllm_killed_in_step3")
    saved = runs.kill_during_save(run_dir, "vllm_killed_in_save")
    resumed, resume_s, first_step_s = runs.resume_to_end(run_dir, "vllm_resumed")
    print(f"vLLM: kill -9 {killed['delay_s']:.2f}s into step 3 (step 2 took {killed['step_s']:.2f}s), then during "
          f"a save (tracker stayed at {saved}); restart -> 'resumed from' {resume_s:.1f}s, -> step 3 done again "
          f"{first_step_s:.1f}s")
    assert_matches_uninterrupted(reference, resumed, [3, 4], "vLLM, kill -9 in a step and in a save")


# == data checked before Ray: a row without ground truth, an overlong prompt, an empty val file ====================
# (section: data)
# Each case runs the real entry (`python -m verl.trainer.main_ppo`) on a bad file and times how long the problem
# takes to surface: the data check refuses before Ray, a model or a worker starts, so nothing is written.


def _data_row(content: str, index: int, truth: str | None = "7") -> dict:
    return {"data_source": "arithmetic", "prompt": [{"role": "user", "content": content}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": truth}, "extra_info": {"split": "train", "index": index}}


_LONG_PROMPT = "Compute 12 + 5 - 3 and explain every step of the working in words. " * 20  # > 128 tokens


def _write_data(folder, train: list[dict], val: list[dict]):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", val)):
        table = pa.Table.from_pylist(rows or [_data_row("x", 0)])
        pq.write_table(table if rows else table.slice(0, 0), str(folder / f"{name}.parquet"))
    return folder


def _run_main_ppo(tmp_path, data_dir, *extra: str, model_dir=None, timeout: int = 120):
    """(exit status, stdout + stderr, seconds) of main_ppo on the tiny run's overrides plus `extra`."""
    import os
    import subprocess
    import sys
    import time

    from tests.helpers.e2e import REPO, default_tokenizer_dir, tiny_run_overrides

    overrides = tiny_run_overrides(model_dir or default_tokenizer_dir(), data_dir, tmp_path / "run")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides, *extra], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    print(f"surfaced after {seconds:.1f} s")  # the figure docs/reliability.md quotes (pytest -s shows it)
    return result.returncode, result.stdout + result.stderr, seconds


def _assert_refused_before_ray(tmp_path, code: int, output: str, seconds: float) -> None:
    assert code == 2, output[-3000:]
    assert "Invalid data:" in output and "Traceback" not in output, output[-3000:]
    assert "Ray" not in output and not (tmp_path / "run").exists()  # no Ray, no run folder: nothing to lose
    assert seconds < 60


def test_fault_row_without_ground_truth(tmp_path):
    rows = [_data_row(f"Compute {i} + 1.", i, truth=str(i + 1)) for i in range(8)]
    rows[5]["reward_model"] = {"style": "rule", "ground_truth": None}
    data = _write_data(tmp_path / "data", rows, [_data_row("Compute 1 + 1.", 0, "2")])
    code, output, seconds = _run_main_ppo(tmp_path, data)
    _assert_refused_before_ray(tmp_path, code, output, seconds)
    assert "data.train_files: 1 of 8 rows have no reward_model.ground_truth" in output
    assert "train.parquet row 5." in output


def test_fault_overlong_prompt_refused_under_truncation_error(tmp_path):
    rows = [_data_row(f"Compute {i} + 1.", i, truth=str(i + 1)) for i in range(8)]
    rows[2]["prompt"][0]["content"] = rows[6]["prompt"][0]["content"] = _LONG_PROMPT
    data = _write_data(tmp_path / "data", rows, [_data_row("Compute 1 + 1.", 0, "2")])
    code, output, seconds = _run_main_ppo(tmp_path, data)  # data.truncation: error, the default
    _assert_refused_before_ray(tmp_path, code, output, seconds)
    assert "data.train_files: 2 of 8 prompts are longer than data.max_prompt_length=128 tokens" in output
    assert "train.parquet rows 2 (" in output and "), 6 (" in output


def test_fault_overlong_prompts_filtered_are_counted(tmp_path):
    """filter_overlong_prompts=true drops them and says how many; here too many go for one batch of 4, which is
    refused before Ray instead of training 0 steps (the run that goes on is the slow case below)."""
    rows = [_data_row(f"Compute {i} + 1.", i, truth=str(i + 1)) for i in range(8)]
    for i in (0, 3, 4, 7, 1):
        rows[i]["prompt"][0]["content"] = _LONG_PROMPT
    data = _write_data(tmp_path / "data", rows, [_data_row("Compute 1 + 1.", 0, "2")])
    code, output, seconds = _run_main_ppo(tmp_path, data, "data.filter_overlong_prompts=true")
    _assert_refused_before_ray(tmp_path, code, output, seconds)
    assert ("data.train_files: 3 rows left after data.filter_overlong_prompts (5 of 8 prompts are longer than "
            "data.max_prompt_length=128 tokens), fewer than one batch") in output


@pytest.mark.slow
def test_fault_overlong_prompts_filtered_run_goes_on(tmp_path):
    from tests.helpers.e2e import make_tiny_model_dir, train_step_rows

    rows = [_data_row(f"Compute {i} + 1.", i, truth=str(i + 1)) for i in range(8)]
    rows[1]["prompt"][0]["content"] = rows[6]["prompt"][0]["content"] = _LONG_PROMPT
    data = _write_data(tmp_path / "data", rows, [_data_row("Compute 1 + 1.", 0, "2")])
    model = make_tiny_model_dir(tmp_path / "model")
    code, output, _ = _run_main_ppo(tmp_path, data, "data.filter_overlong_prompts=true",
                                    "trainer.total_training_steps=1", model_dir=model, timeout=540)
    assert code == 0, output[-3000:]
    assert "[data check] train 8 rows, 2 filtered; val 1 rows, 0 filtered" in output
    assert len(train_step_rows(tmp_path / "run" / "report")) == 1


def test_fault_empty_val_file(tmp_path):
    rows = [_data_row(f"Compute {i} + 1.", i, truth=str(i + 1)) for i in range(8)]
    data = _write_data(tmp_path / "data", rows, [])
    for extra in ((), ("data.filter_overlong_prompts=true",)):
        code, output, seconds = _run_main_ppo(tmp_path, data, *extra)
        _assert_refused_before_ray(tmp_path, code, output, seconds)
        assert "data.val_files: no rows to validate on (test.parquet: 0)" in output
        assert "data.val_files=null" in output and "longer than" not in output
