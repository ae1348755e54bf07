"""The math of the RL algorithms, split by role; everything public is re-exported here.
`verl.trainer.ppo.core_algos` (upstream's path) is this very module.

- registry.py     names -> functions for advantage estimators and policy losses
- advantage.py    advantage estimators (GAE, GRPO, RLOO, REINFORCE++, ReMax, OPO, GPG, pass@k)
- otb.py          the optimal token baseline (optimal_token_baseline, tir_optimal_token_baseline)
- policy_loss.py  PPO-family policy losses; policy_loss_cov.py the covariance-based ones
- losses.py       loss aggregation, value loss, entropy loss (entropy_from_logits from verl.utils)
- kl.py           KL estimators and KL coefficient controllers
- batch.py        the DataProto-level steps the trainer calls (KL in reward, compute_advantage)

Custom estimator / loss::

    from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss  # or: from verl.algos

    @register_adv_est("my_est")            # algorithm.adv_estimator=my_est
    def my_est(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        ...
        return advantages, returns

    @register_policy_loss("my_loss")       # actor_rollout_ref.actor.policy_loss.loss_mode=my_loss
    def my_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                rollout_is_weights=None):
        ...
        return pg_loss, {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, "actor/pg_clipfrac_lower": 0.0}
"""


from verl.algos.advantage import (
    compute_gae_advantage_return,
    compute_gpg_outcome_advantage,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from verl.algos.batch import apply_kl_penalty, compute_advantage, compute_pf_ppo_reweight_data
from verl.algos.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    compute_rewards,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from verl.algos.losses import (
    LOSS_AGG_MODES,
    agg_loss,
    compute_entropy_loss,
    compute_value_loss,
    entropy_from_logits,
)
from verl.algos.otb import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
    sum_pi_squared_from_logits,
)
from verl.algos.policy_loss import (
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_reinforce,
    compute_policy_loss_sapo,
    compute_policy_loss_vanilla,
)
from verl.algos.policy_loss_cov import compute_policy_loss_clip_cov, compute_policy_loss_kl_cov
from verl.algos.registry import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    AdvantageEstimator,
    get_adv_estimator_fn,
    get_policy_loss_fn,
    register_adv_est,
    register_policy_loss,
)
from verl.utils.torch_masked import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "compute_optimal_token_baseline_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "sum_pi_squared_from_logits",
    "ADV_ESTIMATOR_REGISTRY",
    "POLICY_LOSS_REGISTRY",
    "AdvantageEstimator",
    "register_adv_est",
    "get_adv_estimator_fn",
    "register_policy_loss",
    "get_policy_loss_fn",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_policy_loss",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_cispo",
    "compute_policy_loss_sapo",
    "compute_policy_loss_reinforce",
    "LOSS_AGG_MODES",
    "agg_loss",
    "compute_value_loss",
    "compute_entropy_loss",
    "entropy_from_logits",
    "KL_ESTIMATORS",
    "kl_penalty",
    "kl_penalty_forward",
    "compute_rewards",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_pf_ppo_reweight_data",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
