"""A discriminative reward model in the reward loop (reward_model.rollout.name=hf, no custom reward function):
served on HF behind vLLM's /classify, each sample scored on its own through DisRMRewardManager.

The loop's per-sample scores equal the FSDP reward-model worker's batch pass on the same samples (re-templated
for the reward model's chat format, as upstream's disrm path renders them), with the dataset's messages and with
messages recovered from the decoded prompt; the server's /classify answers in vLLM's format and refuses what it
cannot answer by name; the trainer's wiring picks the discriminative path only without a reward function.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from tests.workers.reward_model.rm_fixtures import (
    OTHER_TEMPLATE,
    expected_rm_scores,
    make_batch,
    make_tiny_rm_dir,
    reference_scores,
)

TOL = 1e-4


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory) -> str:
    return str(make_tiny_rm_dir(tmp_path_factory.mktemp("disrm") / "rm", "token", chat_template=OTHER_TEMPLATE,
                                seed=2))


def _rm(rm_dir: str):
    from verl.trainer.config.reward import RewardModelConfig, RewardModelRolloutConfig

    judge = RewardModelRolloutConfig(name="hf", dtype="float32", prompt_length=96, response_length=32)
    rm = RewardModelConfig(enable=True, use_reward_loop=True, rollout=judge)
    rm.model.path = rm_dir
    return rm


@pytest.fixture(scope="module")
def server(rm_dir):
    from verl.workers.genrm_engine import GenRMServer

    served = GenRMServer(_rm(rm_dir), discriminative=True)
    yield served
    served.shutdown()


def _post(address: str, body: dict, path: str = "classify") -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{address}/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _loop_scores(server, rm_dir: str, batch, num_workers: int = 3) -> torch.Tensor:
    from transformers import AutoTokenizer

    from tests.helpers.e2e import default_tokenizer_dir
    from verl.trainer.config.ppo_trainer import PPOTrainerConfig
    from verl.workers.genrm_engine import GenRMEndpoint
    from verl.workers.reward_loop.disrm import DisRMRewardManager
    from verl.workers.reward_loop.manager import RewardLoopManager

    config = PPOTrainerConfig()
    config.reward_model = _rm(rm_dir)
    endpoint = GenRMEndpoint(rm_dir)
    endpoint.address = server.address()
    manager = DisRMRewardManager(config, AutoTokenizer.from_pretrained(default_tokenizer_dir()), endpoint)
    loop = RewardLoopManager(manager, num_workers)
    try:
        return loop(batch, return_dict=True)["reward_tensor"]
    finally:
        loop.close()


def _worker_scores(rank: int, port: int, rm_dir: str, tokenizer_dir: str, raw_chat: bool, results) -> None:
    from tests.gpu.ranks import join_one_rank, leave
    from tests.workers.reward_model.test_reward_model_worker import _config
    from verl.workers.reward_model_worker import RewardModelWorker

    join_one_rank(port)
    try:
        worker = RewardModelWorker(_config(rm_dir, tokenizer_dir, {"micro_batch_size_per_gpu": 4}))
        worker.init_model()
        results[rank] = worker.compute_rm_score(make_batch(raw_chat=raw_chat)).batch["rm_scores"]
    finally:
        leave()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("raw_chat", [True, False], ids=["raw_prompt", "decoded_prompt"])
def test_loop_scores_equal_the_reward_model_workers_batch_pass(server, rm_dir, raw_chat):
    from tests.helpers.e2e import default_tokenizer_dir
    from tests.helpers.ranks import free_port, run_ranks

    batch = make_batch(raw_chat=raw_chat)
    got = _loop_scores(server, rm_dir, batch)
    worker = run_ranks(_worker_scores, free_port(), rm_dir, str(default_tokenizer_dir()), raw_chat, nprocs=1,
                       timeout_s=240)[0]
    assert torch.allclose(got, worker, atol=TOL), ((got - worker).abs() > TOL).nonzero().tolist()
    reference = expected_rm_scores(batch, reference_scores(Path(rm_dir), make_batch(), retemplate=True))
    assert torch.allclose(got, reference, atol=TOL)  # both equal plain HF on each re-templated row alone
    assert got[3].abs().sum() == 0 and (got != 0).sum() == len(batch) - 1  # the empty response scores nothing


def test_classify_answers_in_vllms_format_and_batches(server, rm_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": "4"}],
                                           tokenize=False) for q in ("2 + 2?", "Say hi.", "What is 1 + 1?")]
    status, raw = _post(server.address(), {"model": rm_dir, "input": texts, "use_activation": False,
                                           "add_special_tokens": False})
    assert status == 200 and raw["object"] == "list" and [d["index"] for d in raw["data"]] == [0, 1, 2]
    assert all(d["num_classes"] == 1 and len(d["probs"]) == 1 for d in raw["data"])
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(rm_dir, num_labels=1).eval()
    for text, item in zip(texts, raw["data"]):
        ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            want = float(model(input_ids=ids).logits[0, -1, 0])
        assert item["probs"][0] == pytest.approx(want, abs=TOL)  # the padded batch scores each row as alone
    _, activated = _post(server.address(), {"input": texts[0], "add_special_tokens": False})  # vLLM's default
    assert activated["data"][0]["probs"][0] == pytest.approx(float(torch.sigmoid(torch.tensor(
        raw["data"][0]["probs"][0]))), abs=1e-6)
    assert raw["usage"]["prompt_tokens"] == sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in texts)


@pytest.mark.parametrize("body, status, named", [
    ({"input": "x", "truncate_prompt_tokens": 5}, 400, "'truncate_prompt_tokens'"),
    ({"input": "x", "model": "other"}, 404, "not served"),
    ({"input": []}, 400, "'input'"),
    ({"input": "x " * 400}, 400, "reward_model.rollout.prompt_length + response_length"),
    ({"input": "x", "use_activation": "no"}, 400, "true or false"),
])
def test_classify_refuses_what_it_cannot_answer(server, body, status, named):
    got, error = _post(server.address(), body)
    assert got == status and named in error["error"]["message"]
    assert _post(server.address(), {"input": "x"}, path="v1/chat/completions")[0] == 404


def test_the_trainer_serves_a_discriminative_model_only_without_a_reward_function(rm_dir):
    from tests.helpers.e2e import default_tokenizer_dir
    from tests.workers.reward_manager.test_genrm_engine import UPSTREAM_STYLE, _check
    from verl.models.loader import load_tokenizer
    from verl.trainer.ppo.genrm import genrm_endpoint
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.workers.reward_loop.disrm import DisRMRewardManager

    tokenizer = load_tokenizer(str(default_tokenizer_dir()), "test")
    no_function = [o for o in UPSTREAM_STYLE if not o.startswith("custom_reward_function.path")]
    cfg = _check([*no_function, f"reward_model.model.path={rm_dir}"])
    manager = load_reward_manager(cfg, tokenizer, num_examine=0)
    assert isinstance(manager.manager, DisRMRewardManager) and genrm_endpoint(cfg).discriminative
    judged = _check(UPSTREAM_STYLE)
    assert not isinstance(load_reward_manager(judged, tokenizer, num_examine=0).manager, DisRMRewardManager)
    on_vllm = _check([*no_function, f"reward_model.model.path={rm_dir}", "reward_model.rollout.name=vllm"])
    assert isinstance(load_reward_manager(on_vllm, tokenizer, num_examine=0).manager, DisRMRewardManager)


def _edited_copy(src: str, dst, **config_changes) -> str:
    import shutil

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(config_changes)
    (dst / "config.json").write_text(json.dumps(config))
    return str(dst)


def test_what_vllms_pooling_runner_cannot_serve_is_refused_before_ray(rm_dir, tmp_path):
    """rollout.name=vllm with no reward function: the folder must be a one-label token- or sequence-classification
    model with its score head; anything else is refused when the reward manager is built (before Ray)."""
    from tests.helpers.e2e import default_tokenizer_dir
    from tests.helpers.tiny_model import tiny_llama
    from tests.workers.reward_manager.test_genrm_engine import UPSTREAM_STYLE, _check
    from verl.models.loader import load_tokenizer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.config_errors import RewardFunctionError

    tokenizer = load_tokenizer(str(default_tokenizer_dir()), "test")
    causal = tmp_path / "causal"
    tiny_llama(seed=0).save_pretrained(causal)
    folders = {
        "not a token- or sequence-classification": str(causal),
        "num_labels=2": _edited_copy(rm_dir, tmp_path / "two", num_labels=2,
                                     id2label={"0": "a", "1": "b"}, label2id={"a": 0, "b": 1}),
        "score.weight is missing": _edited_copy(str(causal), tmp_path / "headless",
                                                architectures=["LlamaForTokenClassification"], num_labels=1,
                                                id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0}),
    }
    no_function = [o for o in UPSTREAM_STYLE if not o.startswith("custom_reward_function.path")]
    for named, folder in folders.items():
        cfg = _check([*no_function, f"reward_model.model.path={folder}", "reward_model.rollout.name=vllm"])
        with pytest.raises(RewardFunctionError, match=named) as info:
            load_reward_manager(cfg, tokenizer, num_examine=0)
        assert "reward_model.model.path" in str(info.value)


class _GPUPool:
    use_gpu = True


@pytest.mark.parametrize("device, own_pool, actor_pool, warned, colocated", [
    ("cuda", False, None, True, False),  # no actor pool with a GPU to share: the judge runs on one CPU, said so
    ("cuda", False, _GPUPool(), False, True),  # upstream's colocated mode: shares the actor's GPU
    ("cuda", True, _GPUPool(), False, False),  # its own pool
    ("cpu", False, _GPUPool(), False, False)])  # CPU: nothing changes, no warning
def test_start_genrm_resolves_the_device_and_colocates_on_the_actors_gpu(monkeypatch, capsys, rm_dir, device,
                                                                         own_pool, actor_pool, warned, colocated):
    from tests.workers.reward_manager.test_genrm_engine import UPSTREAM_STYLE, _check
    from verl.trainer.ppo import genrm
    from verl.utils import device as device_module

    started = {}

    class Manager:
        replica_addresses = ["127.0.0.1:1"]

        def __init__(self, rm, device, discriminative, colocate_pool):
            started.update(device=device, discriminative=discriminative, pool=colocate_pool)
            self.colocated = genrm.colocates(rm, device, discriminative, colocate_pool)

        def get_router_address(self):
            return "127.0.0.1:1"

    monkeypatch.setattr(genrm, "RewardModelManager", Manager)
    monkeypatch.setattr(device_module, "get_device_name", lambda: device)
    pool = ["reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=1", "reward_model.nnodes=1"]
    cfg = _check([*UPSTREAM_STYLE, *(pool if own_pool else [])])
    manager = genrm.start_genrm(cfg, actor_pool)
    # "auto" resolved, never passed on as is; the actor's pool handed over
    assert started == {"device": device, "discriminative": False, "pool": actor_pool}
    assert manager.colocated is colocated
    captured = capsys.readouterr()
    assert ("runs on one CPU" in captured.err) is warned
    assert ("sharing the actor's GPU, asleep while it trains" in captured.out) is colocated


def test_genrm_asleep_sleeps_a_colocated_judge_around_the_updates_and_wakes_it_even_on_failure():
    from verl.trainer.ppo.genrm import genrm_asleep

    calls = []

    class Manager:
        def __init__(self, colocated):
            self.colocated = colocated

        def sleep(self):
            calls.append("sleep")

        def wake_up(self):
            calls.append("wake_up")

    with genrm_asleep(Manager(True)):
        calls.append("update")
    assert calls == ["sleep", "update", "wake_up"]
    calls.clear()
    with pytest.raises(RuntimeError, match="update failed"), genrm_asleep(Manager(True)):
        calls.append("update")
        raise RuntimeError("update failed")
    assert calls == ["sleep", "update", "wake_up"]
    calls.clear()
    with genrm_asleep(Manager(False)), genrm_asleep(None):  # its own pool, CPU, or no judge: untouched
        calls.append("update")
    assert calls == ["update"]


def test_the_reward_loop_without_a_reward_model_says_what_it_scores(capsys):
    from tests.workers.reward_manager.test_genrm_engine import _check
    from verl.trainer.ppo import genrm

    assert genrm.start_genrm(_check(["reward_model.use_reward_loop=true"])) is None
    out = capsys.readouterr().out
    assert "reward_model.use_reward_loop=true without a reward model" in out and "per sample" in out
    assert genrm.start_genrm(_check([])) is None and capsys.readouterr().out == ""  # no loop, no note
