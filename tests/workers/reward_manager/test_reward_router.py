"""Several judge replicas behind the reward router (verl.workers.rollout.reward_router): requests spread over the
replicas by least outstanding requests (turn by turn when they come one at a time), answers equal to one engine's,
a replica that is down routed around, none left answered 503 by name, a hung one 504 by name; and the Ray side
(RewardModelManager: reward_model.enable_resource_pool with n_gpus_per_node=2 starts two engines and a router)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.workers.reward_manager.test_genrm_engine import _ask, _post, _rm
from verl.workers.genrm_engine import GenRMServer, merge_replica_stats, num_replicas
from verl.workers.rollout.reward_router import RewardRouter

QUESTIONS = [f"Question {i}: what is {i} + {i}?" for i in range(4)]


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    from tests.helpers.tiny_model import tiny_llama
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("router_judge")
    tokenizer = build_tiny_tokenizer()
    tiny_llama(seed=3, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
               eos_token_id=tokenizer.eos_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _get(address: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _content(reply: tuple[int, dict]) -> str:
    assert reply[0] == 200, reply
    return reply[1]["choices"][0]["message"]["content"]


def test_sequential_requests_take_turns_and_answer_as_one_engine(random_dir):
    servers = [GenRMServer(_rm(random_dir)) for _ in range(2)]
    router = RewardRouter([s.address() for s in servers])
    address = router.start()
    try:
        routed = [_content(_post(address, _ask(q))) for q in QUESTIONS]
        alone = [_content(_post(servers[0].address(), _ask(q))) for q in QUESTIONS]
        per_replica = [_get(s.address(), "/metrics")[1]["completed"] for s in servers]
        status, models = _get(address, "/v1/models")  # passed on to a replica
        health = _get(address, "/health")
        metrics = _get(address, "/metrics")[1]
    finally:
        router.stop()
        for server in servers:
            server.shutdown()
    assert routed == alone  # the router changes nothing in the answer
    # one at a time: replica 0, 1, 0, 1 (then the 4 direct requests on replica 0)
    assert per_replica == [2 + 4, 2]
    assert status == 200 and random_dir in [m["id"] for m in models["data"]]
    assert health[0] == 200 and set(health[1]["replicas"].values()) == {"ok"}
    assert [r["completed"] for r in metrics["replicas"]] == [3, 2]  # the /v1/models GET went to replica 0
    assert metrics["requests"] == metrics["completed"] == 5 and metrics["rerouted"] == 0


def test_concurrent_requests_go_to_the_replica_with_the_fewest_in_flight(random_dir):
    """Four requests at once over two engines that have not started yet: two wait on each (least outstanding),
    and each answer equals the one a single engine gives the question alone."""
    servers = [GenRMServer(_rm(random_dir), start_engine=False) for _ in range(2)]
    router = RewardRouter([s.address() for s in servers])
    address = router.start()
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = _content(_post(address, _ask(QUESTIONS[i])))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        while sum(s.server.engine_loop._waiting for s in servers) < 4:
            threading.Event().wait(0.01)
        waiting = [s.server.engine_loop._waiting for s in servers]
        for server in servers:
            server.start_engine()
        for thread in threads:
            thread.join()
        alone = {i: _content(_post(servers[0].address(), _ask(q))) for i, q in enumerate(QUESTIONS)}
    finally:
        router.stop()
        for server in servers:
            server.shutdown()
    assert waiting == [2, 2]
    assert answers == alone


def test_a_replica_that_is_down_is_routed_around_and_none_left_is_named(random_dir):
    servers = [GenRMServer(_rm(random_dir)) for _ in range(2)]
    addresses = [s.address() for s in servers]
    router = RewardRouter(addresses)
    address = router.start()
    try:
        want = _content(_post(servers[1].address(), _ask(QUESTIONS[0])))
        servers[0].shutdown()  # its port refuses connections now
        got = [_content(_post(address, _ask(QUESTIONS[0]))) for _ in range(3)]
        metrics = _get(address, "/metrics")[1]
        health = _get(address, "/health")
        servers[1].shutdown()
        status, error = _post(address, _ask(QUESTIONS[0]))
        down = _get(address, "/health")
    finally:
        router.stop()
    assert got == [want] * 3
    assert metrics["rerouted"] == 1 and metrics["replicas"][0]["down"].startswith("unreachable")
    assert [r["completed"] for r in metrics["replicas"]] == [0, 3]
    assert health[0] == 200 and health[1]["replicas"][addresses[0]] != "ok"
    assert status == 503 and error["error"]["type"] == "RewardRouterError"
    message = error["error"]["message"]
    assert "none of the 2 reward-model replicas" in message and all(a in message for a in addresses)
    assert down[0] == 503


def test_a_replica_that_hangs_is_answered_504_naming_it():
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    hung = f"127.0.0.1:{silent.getsockname()[1]}"
    router = RewardRouter([hung], forward_timeout_s=0.5)
    address = router.start()
    try:
        status, error = _post(address, _ask("x"))
    finally:
        router.stop()
        silent.close()
    assert status == 504 and hung in error["error"]["message"] and "within 0.5 s" in error["error"]["message"]


def test_the_replica_count_and_merged_counters():
    from verl.trainer.config.reward import RewardModelConfig

    rm = RewardModelConfig(enable=True, enable_resource_pool=True, n_gpus_per_node=2, nnodes=2)
    assert num_replicas(rm) == 4
    assert num_replicas(RewardModelConfig(enable=True, n_gpus_per_node=2, nnodes=2)) == 1  # no pool: one engine
    merged = merge_replica_stats([{"completed": 2, "max_in_flight": 3, "failed": 0},
                                  {"completed": 5, "max_in_flight": 1, "failed": 1}])
    assert (merged["completed"], merged["max_in_flight"], merged["failed"]) == (7, 3, 1)
    assert len(merged["replicas"]) == 2


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from verl.utils.ray_utils import init_ray

    if ray.is_initialized():
        ray.shutdown()
    init_ray({"ray_init": {"object_store_memory": 200 * 1024**2, "log_to_driver": False}},
             run_dir="/tmp/vrouter_ray", num_cpus=3)
    yield
    ray.shutdown()


def _wait_until_dead(actor, limit_s: float = 120.0) -> None:
    """Block until ``actor`` is dead: a call on it raises RayActorError (bounded, so a kill that never lands fails)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=5)
        except RayActorError:
            return
        except GetTimeoutError:
            continue
    raise AssertionError(f"the killed actor still answered after {limit_s:g} s")


@pytest.mark.timeout(300)
def test_the_manager_starts_one_engine_per_device_and_a_router(random_dir, local_ray):
    """enable_resource_pool with n_gpus_per_node=2: two judge actors (one CPU each) and the router in front; a
    replica killed mid-run is routed around and reported dead at shutdown."""
    import ray

    from verl.trainer.config.reward import RewardModelConfig
    from verl.workers.genrm_engine import RewardModelManager

    base = _rm(random_dir)
    rm = RewardModelConfig(enable=True, use_reward_loop=True, enable_resource_pool=True, n_gpus_per_node=2, nnodes=1,
                           rollout=base.rollout, model=base.model)
    manager = RewardModelManager(rm)
    try:
        address = manager.get_router_address()
        replica_addresses = list(manager.replica_addresses)  # in the order of manager.actors
        assert len(replica_addresses) == 2 and address not in replica_addresses
        answers = [_content(_post(address, _ask(q))) for q in QUESTIONS]
        per_replica = [_get(a, "/metrics")[1]["completed"] for a in manager.replica_addresses]
        merged = manager.current_stats()
        ray.kill(manager.actors[0])
        _wait_until_dead(manager.actors[0])  # ray.kill returns before the process is gone
        after = _content(_post(address, _ask(QUESTIONS[1])))
        stats = manager.shutdown()
    finally:
        manager.shutdown()
    assert per_replica == [2, 2] and merged["completed"] == 4 and merged["router"]["completed"] == 4
    assert after == answers[1]
    router = stats["router"]
    by_address = {r["address"]: r for r in router["replicas"]}  # the router's own order need not be the actors'
    killed, survivor = (by_address[a] for a in replica_addresses)
    assert "dead" in stats["replicas"][0] and killed["down"] is not None, router
    # the survivor answered the request after the kill; the dead replica was either tried and routed around, or
    # already marked down by the manager (which watches its actors) before the request came: both are right, and
    # which one happens depends on when the manager noticed the death
    assert router["completed"] == 5 and survivor["completed"] == 3, router
    assert (router["rerouted"], killed["failed"]) in ((1, 1), (0, 0)), router
