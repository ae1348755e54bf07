"""A rank failing inside a collective because its peer died: the driver names the dead peer (the cause), not the
survivor's "Connection reset by peer" (the symptom), whichever of the two reaches Ray first. Ray's wait/get are
replaced by a scripted order of results, so the order is fixed, not left to timing."""

from __future__ import annotations

import ray

from verl.single_controller.ray import base
from verl.single_controller.ray.errors import CallSite


class _Group:
    _dead_peer = base.RayWorkerGroup._dead_peer

    def _call_site(self, rank: int, method: str) -> CallSite:
        return CallSite(group="g", roles=("actor",), method=method, rank=rank, world_size=2, worker_name=f"w{rank}")


def _script(monkeypatch, outcomes: dict[str, BaseException | object]) -> None:
    def wait(pending, num_returns=1, timeout=None):
        return pending[:1], pending[1:]

    def get(ref):
        outcome = outcomes[ref]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(base.ray, "wait", wait)
    monkeypatch.setattr(base.ray, "get", get)


def test_the_dead_peer_is_named_instead_of_the_survivors_connection_error(monkeypatch):
    died = ray.exceptions.ActorDiedError()
    _script(monkeypatch, {"r1": died})
    survivor = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
    found = _Group()._dead_peer(survivor, ["r1"], {"r1": 1}, [0, 1], "update_actor")
    assert found is not None and "rank 1 of 2" in str(found) and "update_actor" in str(found)


def test_an_ordinary_error_is_reported_as_it_is(monkeypatch):
    _script(monkeypatch, {"r1": ray.exceptions.ActorDiedError()})
    assert _Group()._dead_peer(ValueError("bad batch"), ["r1"], {"r1": 1}, [0, 1], "update_actor") is None


def test_no_dead_peer_leaves_the_first_error(monkeypatch):
    _script(monkeypatch, {"r1": {"ok": 1}})
    err = RuntimeError("NCCL error: unhandled system error")
    assert _Group()._dead_peer(err, ["r1"], {"r1": 1}, [0, 1], "generate_sequences") is None
