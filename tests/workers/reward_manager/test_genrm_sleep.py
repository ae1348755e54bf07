"""A judge that shares the actor's GPU sleeps while the actor trains (upstream's colocated mode,
reward_model.enable_resource_pool=false): the HF engine's sleep/wake state machine, on CPU. The device side (memory
freed and restored on CUDA) is tests/gpu/test_genrm_colocated_gpu.py."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from tests.trainer.ppo.test_trainer_keys import tokenizer  # noqa: F401 - fixture (the trainer tests' tokenizer)
from tests.workers.reward_manager.test_genrm_engine import _ask, _post, _rm, random_dir  # noqa: F401 - fixture
from verl.workers.genrm_engine import GenRMServer


def _health(address: str) -> dict:
    with urllib.request.urlopen(f"http://{address}/health", timeout=60) as reply:
        return json.loads(reply.read())


def _answer(server: GenRMServer, text: str) -> str:
    status, body = _post(server.address(), _ask(text))
    assert status == 200, body
    return body["choices"][0]["message"]["content"]


def test_sleep_moves_the_weights_to_host_memory_refuses_requests_and_wake_up_restores_them(random_dir):  # noqa: F811
    server = GenRMServer(_rm(random_dir), colocated=True)
    backend = server.server.backend
    module = backend.rollout.module
    moves = []
    to = module.to

    def recording_to(*args, **kwargs):
        moves.append(str(args[0]))
        return to(*args, **kwargs)

    module.to = recording_to
    try:
        before = [_answer(server, q) for q in ("Is 2 + 2 = 4?", "Name a prime.")]
        device = next(module.parameters()).device  # the CPU here (CUDA where a GPU is visible)
        assert _health(server.address())["status"] == "ok"
        server.sleep()
        server.sleep()  # idempotent: nothing moves twice
        assert moves == ["cpu"] and server.server.asleep
        assert all(p.device.type == "cpu" for p in module.parameters())
        status, error = _post(server.address(), _ask("Is 2 + 2 = 4?"))
        assert status == 503 and "asleep" in error["error"]["message"]
        assert "reward_model.enable_resource_pool" in error["error"]["message"]
        assert _health(server.address())["status"] == "asleep"
        server.wake_up()
        server.wake_up()
        assert moves == ["cpu", str(device)]  # back to the device the weights were on
        assert not server.server.asleep
        after = [_answer(server, q) for q in ("Is 2 + 2 = 4?", "Name a prime.")]
    finally:
        stats = server.shutdown()
    assert after == before  # greedy answers identical across a sleep
    assert stats["completed"] == 4 and stats["requests"] == 4  # the refused request never reached the engine


def test_sleep_waits_for_the_requests_in_flight_and_refuses_new_ones_meanwhile(random_dir):  # noqa: F811
    server = GenRMServer(_rm(random_dir), colocated=True)
    backend = server.server.backend
    order, entered, release = [], threading.Event(), threading.Event()
    step, sleep = backend.step, backend.sleep

    def blocking_step():
        if backend.queue:
            entered.set()
            release.wait()
            order.append("step")
        return step()

    def recorded_sleep():
        order.append("sleep")
        sleep()

    backend.step, backend.sleep = blocking_step, recorded_sleep
    replies: dict[str, tuple] = {}
    try:
        asking = threading.Thread(target=lambda: replies.update(first=_post(server.address(), _ask("Hi"))))
        asking.start()
        entered.wait()
        sleeping = threading.Thread(target=server.sleep)
        sleeping.start()
        with server.server._sleep_state:  # sleep() has stopped taking requests and waits for the one in flight
            server.server._sleep_state.wait_for(lambda: server.server.asleep)
        status, error = _post(server.address(), _ask("Hi again"))
        assert status == 503 and "asleep" in error["error"]["message"]
        assert order == []  # still generating: nothing freed under it
        release.set()
        asking.join()
        sleeping.join()
        assert order == ["step", "sleep"]
        assert replies["first"][0] == 200
        server.wake_up()
        assert _post(server.address(), _ask("Hi"))[0] == 200
    finally:
        release.set()
        server.shutdown()


def test_sleep_gives_up_when_a_request_does_not_finish_and_stays_awake(random_dir):  # noqa: F811
    server = GenRMServer(_rm(random_dir), colocated=True)
    backend = server.server.backend
    entered, release = threading.Event(), threading.Event()
    step = backend.step

    def blocking_step():
        if backend.queue:
            entered.set()
            release.wait()
        return step()

    backend.step = blocking_step
    try:
        asking = threading.Thread(target=lambda: _post(server.address(), _ask("Hi")))
        asking.start()
        entered.wait()
        with pytest.raises(TimeoutError, match="1 request"):
            server.server.sleep(timeout_s=0)
        assert not server.server.asleep and backend._awake_device is None
        release.set()
        asking.join()
    finally:
        release.set()
        server.shutdown()


def test_a_discriminative_server_does_not_sleep(tmp_path):
    server = object.__new__(GenRMServer)
    server.server = object()  # not a chat server: the /classify server has no sleep
    with pytest.raises(RuntimeError, match="does not sleep"):
        server.sleep()


@pytest.mark.timeout(300)
def test_the_manager_places_a_colocated_judge_in_the_actor_pools_bundle_and_sleeps_it_over_ray(random_dir,  # noqa: F811
                                                                                               monkeypatch):
    """The Ray side of colocated mode, on CPU (a GPU machine gives the replica 1/max_colocate_count of the bundle's
    GPU as well): the judge actor is scheduled into the actor pool's placement group, takes one of its group slots,
    and the manager's sleep()/wake_up() reach it."""
    import ray

    from verl.single_controller.ray.resource_pool import RayResourcePool
    from verl.utils.ray_utils import init_ray
    from verl.workers import genrm_engine

    if ray.is_initialized():
        ray.shutdown()
    init_ray({"ray_init": {"object_store_memory": 200 * 1024**2, "log_to_driver": False}},
             run_dir="/tmp/vgenrm_sleep_ray", num_cpus=2)
    pool = RayResourcePool([1], use_gpu=False, name_prefix="actor_pool")
    try:
        placement = pool.get_placement_groups()[0]
        monkeypatch.setattr(genrm_engine, "colocates", lambda *args: True)  # as on a GPU machine
        manager = genrm_engine.RewardModelManager(_rm(random_dir), device="cuda", colocate_pool=pool)
        try:
            assert manager.colocated and pool.groups_placed == 1
            actor = manager.actors[0]
            where = ray.get(actor.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_placement_group_id()))
            assert where == placement.id.hex()
            address = manager.get_router_address()
            before = _post(address, _ask("Is 2 + 2 = 4?"))[1]["choices"][0]["message"]["content"]
            manager.sleep()
            status, error = _post(address, _ask("Is 2 + 2 = 4?"))
            assert status == 503 and "asleep" in error["error"]["message"]
            manager.wake_up()
            status, after = _post(address, _ask("Is 2 + 2 = 4?"))
            assert status == 200 and after["choices"][0]["message"]["content"] == before
        finally:
            manager.shutdown()
        assert pool.groups_placed == 0  # its slot handed back
    finally:
        pool.remove()
        ray.shutdown()


def test_train_step_sleeps_a_colocated_judge_only_around_the_updates(tokenizer):  # noqa: F811
    """RayPPOTrainer.train_step with stand-in worker groups: the judge is awake through generation and scoring and
    asleep exactly while the critic and actor update."""
    from tests.trainer.ppo.test_async_reward_step import ROWS, _ActorGroup, _batch_dict, _CriticGroup, _Pools
    from tests.trainer.ppo.test_trainer_keys import make_trainer
    from tests.workers.reward_manager.conftest import PROMPT_LEN, make_batch
    from verl.trainer.ppo.reward import load_reward_manager

    calls: list[str] = []

    class Judge:
        colocated = True

        def sleep(self) -> None:
            calls.append("judge.sleep")

        def wake_up(self) -> None:
            calls.append("judge.wake_up")

    rollout, _ = make_batch(tokenizer, ROWS)
    rollout.batch["response_mask"] = rollout.batch["attention_mask"][:, PROMPT_LEN:]
    trainer = make_trainer(tokenizer=tokenizer)
    trainer.reward_fn = load_reward_manager(trainer.config, tokenizer, num_examine=0)
    trainer.actor_rollout_wg, trainer.critic_wg = _ActorGroup(rollout, calls), _CriticGroup(calls)
    trainer.resource_pool_manager = _Pools()
    trainer.global_steps = 1  # past critic_warmup: the actor is updated
    trainer.genrm = Judge()
    trainer.train_step(_batch_dict(rollout))
    assert calls == ["generate_sequences", "compute_log_prob", "compute_values", "judge.sleep", "update_critic",
                     "update_actor", "judge.wake_up"]
