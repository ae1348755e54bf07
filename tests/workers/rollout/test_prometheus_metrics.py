"""rollout.prometheus: the vLLM engine's metrics scraped over real HTTP from the worker's endpoint after a
generation (its token counters moved by what was generated, labelled with served_model_name), and the scrape
configuration written to prometheus.file with a reload asked of the Prometheus server on prometheus.port.

The vLLM part runs a real in-process engine in a spawned child (as tests/workers/rollout/test_vllm_engine.py), with
the weights synced through the sharding manager in rollout.checkpoint_engine's buckets; needs vLLM (skipped
without it). The endpoint and the configuration file are also checked without vLLM.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.helpers.ranks import free_port, run_ranks
from verl.workers.config import PrometheusConfig
from verl.workers.rollout.prometheus import MetricsEndpoint, write_prometheus_config

PROMPT_LEN, RESPONSE_LEN = 8, 6
VOCAB = 8192  # a 2 MiB embedding (fp32): the 1 MiB buckets of the sync are then more than one
LENGTHS = [8, 3, 5, 1]


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
        return reply.read().decode()


def _sample(text: str, metric: str, **labels: str) -> float:
    """The value of ``metric`` whose labels include ``labels`` (exactly one such line)."""
    found = []
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(metric)}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            found.append(float(match.group(2)))
    assert len(found) == 1, (metric, labels, found)
    return found[0]


def test_endpoint_serves_a_registry_in_prometheus_text_format():
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    tokens = Counter("demo_tokens", "tokens seen", ["model_name"], registry=registry)
    endpoint = MetricsEndpoint(registry)
    address = endpoint.start("127.0.0.1")
    try:
        assert "demo_tokens_total{" not in _scrape(address)  # no series before the first count
        tokens.labels(model_name="m").inc(5)
        assert _sample(_scrape(address), "demo_tokens_total", model_name="m") == 5.0
        tokens.labels(model_name="m").inc(2)
        assert _sample(_scrape(address), "demo_tokens_total", model_name="m") == 7.0
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://{address}/other", timeout=10)
        assert info.value.code == 404
    finally:
        endpoint.stop()


class _Prometheus(BaseHTTPRequestHandler):
    """A stand-in Prometheus server: records the reload requests it gets."""

    reloads: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        type(self).reloads.append(self.path)
        self.send_response(200)
        self.end_headers()


def test_scrape_config_is_written_and_the_server_asked_to_reload(tmp_path):
    path = tmp_path / "prom" / "prometheus.yml"
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = PrometheusConfig(enable=True, port=server.server_address[1], file=str(path))
        assert write_prometheus_config(config, ["127.0.0.1:4001", "127.0.0.1:4002"], "vllm") is True
    finally:
        server.shutdown()
        server.server_close()
    assert _Prometheus.reloads == ["/-/reload"]
    written = yaml.safe_load(path.read_text())
    (job,) = written["scrape_configs"]
    assert job["job_name"] == "rollout" and job["static_configs"] == [{"targets": ["127.0.0.1:4001", "127.0.0.1:4002"]}]
    # no Prometheus server on the port: the file is still written (upstream's reload is best effort too)
    path.unlink()
    assert write_prometheus_config(PrometheusConfig(enable=True, port=free_port(), file=str(path)), ["h:1"], "vllm") is False
    assert yaml.safe_load(path.read_text())["scrape_configs"][0]["static_configs"] == [{"targets": ["h:1"]}]


def _scenario(rank: int, port: int, tmp: str, results) -> None:
    import torch
    import torch.distributed as dist

    from tests.helpers.tiny_model import PAD_ID, left_padded_prompts, tiny_llama
    from verl.protocol import DataProto
    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
    from verl.workers.config import CheckpointEngineConfig, RolloutConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout.registry import build_rollout

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    model = tiny_llama(vocab_size=VOCAB, hidden_size=64, num_attention_heads=2, num_key_value_heads=2)
    model.save_pretrained(tmp)
    mesh = create_device_mesh(1)
    module = apply_fsdp2(model, FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="fp32")), mesh)
    cfg = RolloutConfig(
        name="vllm", prompt_length=PROMPT_LEN, response_length=RESPONSE_LEN, dtype="float32", ignore_eos=True,
        max_num_batched_tokens=512, max_num_seqs=8, disable_log_stats=False, engine_kwargs={"vllm": {}},
        prometheus=PrometheusConfig(enable=True, served_model_name="org/tiny-policy", file=f"{tmp}/prom.yml"),
        checkpoint_engine=CheckpointEngineConfig(update_weights_bucket_megabytes=1))
    rollout, manager = build_rollout(cfg, module, None, tmp, mesh)
    r = {"address": rollout.metrics_address, "bucket_bytes": manager.bucket_bytes}
    r["before"] = _scrape(rollout.metrics_address)
    ids, mask, pos = left_padded_prompts(LENGTHS, PROMPT_LEN, seed=3, vocab_size=VOCAB)
    prompts = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos},
                                  meta_info={"eos_token_id": 2, "pad_token_id": PAD_ID, "do_sample": False})
    with manager:
        out = rollout.generate_sequences(prompts)
    r["generated"] = int(out.batch["response_mask"].sum())
    r["buckets"] = manager.last_sync_buckets
    r["params_bytes"] = sum(p.numel() * 4 for p in model.parameters())
    r["after"] = _scrape(rollout.metrics_address)
    results[rank] = r


@pytest.mark.e2e
def test_vllm_metrics_are_scraped_over_http_after_a_generation(tmp_path):
    pytest.importorskip("vllm")
    r = run_ranks(_scenario, free_port(), str(tmp_path), nprocs=1, timeout_s=560)[0]
    assert r["address"].startswith("127.0.0.1:")  # outside Ray: the loopback address
    label = {"model_name": "tiny-policy"}  # served_model_name's last path part
    gen_before = _sample(r["before"], "vllm:generation_tokens_total", **label)
    gen_after = _sample(r["after"], "vllm:generation_tokens_total", **label)
    assert gen_after - gen_before == r["generated"] == len(LENGTHS) * RESPONSE_LEN  # ignore_eos: full responses
    prompt_before = _sample(r["before"], "vllm:prompt_tokens_total", **label)
    assert _sample(r["after"], "vllm:prompt_tokens_total", **label) - prompt_before == sum(LENGTHS)
    # the sync went in 1 MiB buckets (the tiny model is bigger than one): more than one, none over 1 MiB but alone
    assert r["bucket_bytes"] == 2**20
    assert len(r["buckets"]) > 1 and sum(b for _, b in r["buckets"]) == r["params_bytes"]
    assert all(size <= 2**20 or count == 1 for count, size in r["buckets"])
