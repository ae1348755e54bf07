"""rollout.trace with the mlflow backend, end to end on the agent loop: one trace per trajectory in a local file
store, with the loop's run, its engine requests and tool calls as spans and the trajectory's step / sample /
rollout number as attributes; max_samples_per_step_per_worker bounds them; the config check before Ray."""

from __future__ import annotations

import os

import pytest

from verl.utils.rollout_trace import RolloutTraceConfig, get_trajectory_info, rollout_trace_op


@pytest.fixture(autouse=True)
def fresh_tracing():
    RolloutTraceConfig.reset()
    yield
    RolloutTraceConfig.reset()  # a process-wide switch: later tests must not trace


def _traces(uri: str, experiment: str):
    import mlflow

    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return []
    mlflow.flush_trace_async_logging()
    return mlflow.search_traces(locations=[exp.experiment_id], return_type="list")


def test_the_decorator_changes_nothing_without_a_backend():
    class Loop:
        @rollout_trace_op
        def double(self, x):
            return 2 * x

    assert Loop().double(21) == 42 and RolloutTraceConfig.get_backend() is None


def test_trajectory_info_numbers_the_responses_of_each_prompt():
    assert get_trajectory_info(3, ["a", "a", "b"], validate=True) == [
        {"step": 3, "sample_index": "a", "rollout_n": 0, "validate": True},
        {"step": 3, "sample_index": "a", "rollout_n": 1, "validate": True},
        {"step": 3, "sample_index": "b", "rollout_n": 0, "validate": True}]


def test_agent_loop_trajectories_become_mlflow_traces(tmp_path, monkeypatch):
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from tests.workers.rollout.agent_loop.test_tool_agent import CALL, _config, _run, _turns

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    config = _config(tmp_path, **{"rollout.trace.backend": "mlflow",
                                  "rollout.trace.max_samples_per_step_per_worker": 2})
    tokenizer = build_tiny_tokenizer()
    out, _ = _run(config, tokenizer, _turns([CALL % "12*13", "The answer is 156."]), rows=3)
    assert len(out) == 3
    traces = _traces(uri, "verl")  # no trainer names in the batch's meta: the defaults
    assert len(traces) == 2  # three trajectories, two traced
    names = sorted(span.name for span in traces[0].data.spans)
    assert names.count("AsyncLLMServerManager.generate") == 2 and "ToolAgentLoop.run" in names
    assert "ToolAgentLoop._call_tools" in names and "agent_loop" in names
    root = next(span for span in traces[0].data.spans if span.name == "agent_loop")
    assert root.attributes["rollout_n"] in (0, 1, 2)
    assert root.attributes["validate"] is False and root.attributes["step"] == 0
    assert os.path.isdir(tmp_path / "mlruns")  # a local store: nothing left the machine


def test_the_check_before_ray_names_what_tracing_needs():
    from verl.trainer.config import ConfigError, validate_config
    from verl.trainer.config.validate import load_config

    key = "actor_rollout_ref.rollout"
    cfg = validate_config(load_config([f"{key}.trace.backend=mlflow", f"{key}.mode=async"]), check_files=False)
    assert cfg.actor_rollout_ref.rollout.trace.backend == "mlflow"
    with pytest.raises(ConfigError, match="set actor_rollout_ref.rollout.mode=async"):
        validate_config(load_config([f"{key}.trace.backend=mlflow", f"{key}.mode=sync"]), check_files=False)
    with pytest.raises(ConfigError, match="needs the weave package"):
        validate_config(load_config([f"{key}.trace.backend=weave", f"{key}.mode=async"]), check_files=False)


def test_token2text_adds_the_decoded_text(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from verl.utils.rollout_trace import rollout_trace_attr

    @dataclass
    class Out:
        prompt_ids: list
        response_ids: list

    tokenizer = build_tiny_tokenizer()
    ids = tokenizer.encode("hello there", add_special_tokens=False)

    class Loop:
        def __init__(self):
            self.tokenizer = tokenizer

        @rollout_trace_op
        def run(self):
            return Out(ids, ids[:1])

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    RolloutTraceConfig.init("p", "e", "mlflow", token2text=True, tracking_uri=uri)
    with rollout_trace_attr(sample_index=0, step=1, rollout_n=0):
        Loop().run()
    (trace,) = _traces(uri, "p")
    span = next(s for s in trace.data.spans if s.name == "Loop.run")
    assert span.outputs["prompt_text"] == tokenizer.decode(ids) and span.outputs["response_text"] == tokenizer.decode(ids[:1])
    assert span.outputs["output"]["prompt_ids"] == ids


def test_trace_project_and_experiment_follow_the_trainer_unless_set(tmp_path, monkeypatch):
    """rollout.trace.project_name / experiment_name (upstream after v0.7): where the traces go."""
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
    from tests.workers.rollout.agent_loop.test_tool_agent import CALL, _config, _run, _turns
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.workers.rollout.agent_loop.base import TRACE_META_KEY, with_trace_names

    base = ["actor_rollout_ref.rollout.trace.backend=mlflow", "actor_rollout_ref.rollout.mode=async",
            "trainer.project_name=proj", "trainer.experiment_name=exp"]
    trainers = validate_config(load_config(base), check_files=False)
    assert trainers.actor_rollout_ref.rollout.trace.project_name is None  # unset: the trainer's
    assert with_trace_names({}, trainers)[TRACE_META_KEY] == {"project_name": "proj", "experiment_name": "exp"}
    own = validate_config(load_config([*base, "actor_rollout_ref.rollout.trace.project_name=traces"]),
                          check_files=False)
    names = with_trace_names({}, own)[TRACE_META_KEY]
    assert names == {"project_name": "traces", "experiment_name": "exp"}

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    config = _config(tmp_path, **{"rollout.trace.backend": "mlflow"})
    _run(config, build_tiny_tokenizer(), _turns([CALL % "2*3", "6"]), meta_info={TRACE_META_KEY: names})
    (trace,) = _traces(uri, "traces")  # the experiment is the trace project
    root = next(span for span in trace.data.spans if span.name == "agent_loop")
    assert root.attributes["experiment_name"] == "exp"
    assert _traces(uri, "proj") == []
