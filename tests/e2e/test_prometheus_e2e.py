"""rollout.prometheus through the whole stack: Ray, 2 FSDP ranks with one in-process vLLM engine each. After the
workers start, prometheus.file lists both engines' endpoints and the Prometheus server on prometheus.port (a
stand-in here) is asked to reload; after two GRPO steps every listed endpoint, scraped over HTTP, shows its engine's
token counters grown, labelled with served_model_name. Needs vLLM (skipped without it)."""

from __future__ import annotations

import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

pytest.importorskip("vllm")

from tests.e2e.test_vllm_sync import _tiny_vllm_model_dir  # noqa: E402
from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, tiny_run_overrides  # noqa: E402
from tests.workers.rollout.test_prometheus_metrics import _sample  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~150 s; test_prometheus_metrics.py covers the endpoint in CI

ARR = "actor_rollout_ref"


class _Prometheus(BaseHTTPRequestHandler):
    reloads: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        type(self).reloads.append(self.path)
        self.send_response(200)
        self.end_headers()


def _scrape(target: str) -> str:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=30) as reply:
        return reply.read().decode()


def test_engines_metrics_are_listed_and_scraped_through_a_training_run(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scrape_file = tmp_path / "prometheus" / "prometheus.yml"
    overrides = tiny_run_overrides(_tiny_vllm_model_dir(tmp_path / "model"), make_arithmetic_data(tmp_path / "data"),
                                   tmp_path / "run") + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        f"{ARR}.rollout.name=vllm", f"{ARR}.rollout.dtype=float32", f"{ARR}.rollout.max_num_seqs=16",
        f"{ARR}.rollout.disable_log_stats=false", f"{ARR}.rollout.prometheus.enable=true",
        f"{ARR}.rollout.prometheus.port={server.server_address[1]}", f"{ARR}.rollout.prometheus.file={scrape_file}",
        f"{ARR}.rollout.prometheus.served_model_name=org/tiny-policy",
    ]
    seen: dict = {}

    def body(trainer) -> None:
        (job,) = yaml.safe_load(scrape_file.read_text())["scrape_configs"]
        seen["targets"] = job["static_configs"][0]["targets"]
        seen["before"] = [_scrape(t) for t in seen["targets"]]
        trainer.fit()
        seen["after"] = [_scrape(t) for t in seen["targets"]]

    try:
        rows = fit_run(overrides, body)
    finally:
        server.shutdown()
        server.server_close()
    assert [r["step"] for r in rows] == [1, 2]
    assert _Prometheus.reloads == ["/-/reload"]
    assert len(seen["targets"]) == 2 == len(set(seen["targets"]))  # one engine per rank
    for before, after in zip(seen["before"], seen["after"], strict=True):
        for metric in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
            grown = _sample(after, metric, model_name="tiny-policy") - _sample(before, metric, model_name="tiny-policy")
            assert grown > 0, (metric, grown)
