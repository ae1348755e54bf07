"""reward_model.sandbox_fusion.* (and its reward.sandbox_fusion.* spelling) and the run's own sandbox."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.protocol import DataProto
from verl.tools.sandbox_fusion_tools import LOCAL_SANDBOX_ENV
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.reward import SandboxScore, load_reward_manager
from verl.trainer.ppo.sandbox_service import sandbox_needs, start_run_sandbox


def _typed(*overrides):
    return validate_config(load_config(["trainer.logger=[]", *overrides]), check_files=False)


class _RecordingSandbox(BaseHTTPRequestHandler):
    """/run_code that echoes the expected output after a pause, recording requests and how many overlap."""

    requests: list[dict] = []
    in_flight = 0
    max_in_flight = 0
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        with cls.lock:
            cls.requests.append(body)
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        time.sleep(0.2)
        with cls.lock:
            cls.in_flight -= 1
        reply = {"status": "Success", "message": "", "compile_result": None,
                 "run_result": {"status": "Finished", "execution_time": 0.01, "return_code": 0,
                                "stdout": body.get("stdin", ""), "stderr": ""}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def recording_sandbox():
    _RecordingSandbox.requests, _RecordingSandbox.max_in_flight = [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingSandbox)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()


def test_sandbox_fusion_keys_reach_the_code_reward(recording_sandbox):
    # the v0.9 spelling sets the same keys
    config = _typed(f"reward.sandbox_fusion.url={recording_sandbox}", "reward_model.sandbox_fusion.max_concurrent=2",
                    "+reward.sandbox_fusion.memory_limit_mb=300")
    manager = load_reward_manager(config, build_tiny_tokenizer(), num_examine=0)
    score_fn = manager.compute_score
    assert isinstance(score_fn, SandboxScore)
    completion = "```python\nprint(input())\n```"
    truth = json.dumps({"inputs": ["7\n"], "outputs": ["7\n"]})
    scores = []
    threads = [threading.Thread(target=lambda: scores.append(score_fn("codecontests", completion, truth)))
               for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert scores == [1.0] * 5
    assert all(r["memory_limit_MB"] == 300 and "print(input())" in r["code"] for r in _RecordingSandbox.requests)
    assert _RecordingSandbox.max_in_flight == 2  # max_concurrent bounds the requests in flight


def test_without_a_url_the_default_score_runs_code_sources_on_this_machine():
    manager = load_reward_manager(_typed(), build_tiny_tokenizer(), num_examine=0)
    assert not isinstance(manager.compute_score, SandboxScore)
    # as upstream: without a sandbox url, prime_code runs the tests in a confined child process here
    assert manager.compute_score("codecontests", "print(1)", {"inputs": [""], "outputs": ["1"]}) == 1.0
    assert manager.compute_score("codecontests", "print(2)", {"inputs": [""], "outputs": ["1"]}) == 0.0


def _write(path, sources):
    pq.write_table(pa.Table.from_pylist([{"data_source": s, "prompt": "x"} for s in sources]), path)
    return str(path)


def test_a_run_starts_its_own_sandbox_for_a_tool_or_code_data_without_url(tmp_path, monkeypatch):
    pytest.importorskip("verl.sandbox.local")
    monkeypatch.delenv(LOCAL_SANDBOX_ENV, raising=False)
    tools = tmp_path / "tools.yaml"
    tools.write_text(yaml.safe_dump({"tools": [{"class_name": "verl.tools.sandbox_fusion_tools.SandboxFusionTool",
                                                "config": {"type": "native", "sandbox_fusion_url": None},
                                                "tool_schema": {"type": "function", "function": {
                                                    "name": "code_interpreter", "description": "run code",
                                                    "parameters": {"type": "object", "properties": {}}}}}]}))
    train = _write(tmp_path / "train.parquet", ["codecontests", "arithmetic"])
    plain = _write(tmp_path / "plain.parquet", ["arithmetic"])
    assert sandbox_needs(_typed(f"data.train_files={plain}")) == ([], set())
    config = _typed(f"data.train_files={train}", "actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=true",
                    "trainer.n_gpus_per_node=1",
                    "actor_rollout_ref.rollout.multi_turn.enable=true",
                    f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}")
    assert sandbox_needs(config) == (["code_interpreter"], {"codecontests"})
    try:
        sandbox = start_run_sandbox(config)
    except Exception as err:  # noqa: BLE001 - no namespaces here: the sandbox refuses to start, and says why
        pytest.skip(f"the sandbox cannot run on this machine: {err}")
    try:
        url = os.environ[LOCAL_SANDBOX_ENV]
        assert config.reward_model.sandbox_fusion.url == url
        from verl.sandbox.client import run_code

        assert run_code(url, "print(6 * 7)")["run_result"]["stdout"] == "42\n"
    finally:
        sandbox.stop()
    from verl.sandbox.client import SandboxUnavailable

    with pytest.raises(SandboxUnavailable):
        run_code(url, "print(1)")


def test_agent_loop_scores_replace_the_reward_function_only_where_set():
    import numpy as np
    import torch

    from verl.trainer.ppo.reward import compute_reward

    class Ones:
        def __call__(self, data, return_dict=False):
            assert "rm_scores" not in data.batch.keys()  # the function never sees the agent's scores
            out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
            out[:, 0] = 1.0
            return {"reward_tensor": out, "reward_extra_info": {}}

    rm = torch.zeros(3, 4)
    rm[0, 2] = 5.0
    rm[2, 1] = -1.0
    data = DataProto.from_dict({"responses": torch.zeros(3, 4, dtype=torch.long), "rm_scores": rm},
                               non_tensors={"__rm_scored__": np.array([True, False, True], dtype=object)})
    reward, _ = compute_reward(data, Ones())
    assert reward.tolist() == [[0, 0, 5, 0], [1, 0, 0, 0], [0, -1, 0, 0]]
