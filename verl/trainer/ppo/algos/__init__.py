"""The math of the RL algorithms, split by role; import it through `verl.trainer.ppo.core_algos`.

- registry.py     names -> functions for advantage estimators and policy losses, config access
- advantage.py    advantage estimators (GAE, GRPO, RLOO, REINFORCE++, ReMax, OPO, GPG, pass@k)
- policy_loss.py  PPO-family policy losses; policy_loss_cov.py the covariance-based ones
- losses.py       loss aggregation, value loss, entropy loss
- kl.py           KL estimators and KL coefficient controllers
- batch.py        the DataProto-level steps the trainer calls (KL in reward, compute_advantage)
"""
