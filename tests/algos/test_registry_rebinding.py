"""core_algos.ADV_ESTIMATOR_REGISTRY is read at call time, as upstream reads its module global."""

import pytest

import verl.trainer.ppo.core_algos as core_algos


@pytest.fixture
def own_registry():
    original = core_algos.ADV_ESTIMATOR_REGISTRY
    core_algos.ADV_ESTIMATOR_REGISTRY = {"gae": original["gae"]}
    yield core_algos.ADV_ESTIMATOR_REGISTRY
    core_algos.ADV_ESTIMATOR_REGISTRY = original


def test_a_rebound_registry_receives_registrations_and_serves_lookups(own_registry):
    @core_algos.register_adv_est("only_in_rebound")
    def estimator(**kwargs):
        return kwargs

    assert own_registry["only_in_rebound"] is estimator
    assert core_algos.get_adv_estimator_fn("only_in_rebound") is estimator
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: grpo"):
        core_algos.get_adv_estimator_fn("grpo")  # the built-in is not in the rebound dict


def test_unbound_the_builtin_registry_is_used_again():
    assert "grpo" in core_algos.ADV_ESTIMATOR_REGISTRY
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.ADV_ESTIMATOR_REGISTRY["grpo"]
    with pytest.raises(ValueError, match=r"Unknown advantage estimator simply: nope \(config key algorithm"):
        core_algos.get_adv_estimator_fn("nope")
