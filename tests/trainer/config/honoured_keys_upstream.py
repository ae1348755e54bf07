"""The honoured keys of upstream's later sections (v0.7's `reward:` section, the legacy blocks it folds, and keys of
upstream main after v0.7), added to the audit's table by `add_later_upstream_keys` (honoured_keys.py)."""

from __future__ import annotations

ARR = "actor_rollout_ref"


def add_later_upstream_keys(honoured: dict[str, str]) -> None:
    # upstream v0.7's reward section (reward/reward.yaml): every settable leaf mirrors and sets one of our keys
    _MIRRORS = "tests/trainer/config/test_reward_section_mirrors.py"
    _V07_REWARD_LEAVES = (
        "num_workers max_concurrency_per_worker custom_reward_function.path custom_reward_function.name "
        "reward_manager.source reward_manager.name reward_manager.module.path "
        "reward_model.enable reward_model.enable_resource_pool reward_model.n_gpus_per_node reward_model.nnodes "
        "reward_model.model_path sandbox_fusion.url sandbox_fusion.max_concurrent sandbox_fusion.memory_limit_mb "
        + " ".join(f"reward_model.rollout.{k}" for k in (
            "name dtype gpu_memory_utilization enforce_eager max_num_batched_tokens "
            "max_model_len max_num_seqs load_format engine_kwargs enable_chunked_prefill enable_prefix_caching "
            "disable_log_stats skip_tokenizer_init prompt_length response_length").split())).split()
    honoured |= {f"reward.{leaf}": f"{_MIRRORS}::test_a_leaf_a_user_yaml_sets_sets_our_key_and_the_section_mirrors_it"
                 for leaf in _V07_REWARD_LEAVES}
    # the imported module's name: read by nothing, upstream's loader included; a note when given
    honoured["reward.reward_manager.module.name"] = (
        "tests/trainer/config/test_reward_section.py::test_module_name_is_noted_and_name_is_the_importlib_class")
    honoured["reward.reward_model.rollout.skip_tokenizer_init"] = (
        f"{_MIRRORS}::test_the_command_line_spelling_reads_back_from_the_section")
    honoured["reward.reward_model.rollout.tensor_model_parallel_size"] = (
        f"{_MIRRORS}::test_the_judges_tensor_parallel_size_is_refused_in_either_spelling")
    # later upstream's judge scheduler: a vLLM engine argument (engine_kwargs.vllm), in either spelling
    honoured["reward.reward_model.rollout.scheduling_policy"] = (
        "tests/trainer/config/test_reward_section_later_keys.py::test_scheduling_policy_reaches_the_judge_engine")
    honoured |= {f"sandbox_fusion.{k}": f"{_MIRRORS}::test_legacy_keys_are_folded_and_read_null_afterwards"
                 for k in ("url", "max_concurrent", "memory_limit_mb")}
    honoured |= {f"reward_model.rollout.{k}": f"{_MIRRORS}::test_legacy_keys_are_folded_and_read_null_afterwards"
                 for k in ("enforce_eager", "max_num_batched_tokens", "max_model_len", "max_num_seqs", "load_format",
                           "enable_chunked_prefill", "disable_log_stats", "skip_tokenizer_init")}

    # later upstream's pad_to_length / pad_to_length_bucket: packed rows padded up to a multiple of the bucket
    _PAD = "tests/workers/actor/test_pad_to_length.py"
    _PAD_KEYS = "tests/trainer/config/test_pad_to_length_keys.py"
    for _role in ("actor", "ref"):
        honoured[f"{ARR}.{_role}.pad_to_length"] = f"{_PAD_KEYS}::test_the_actor_key_reaches_its_engine_and_the_reference"
        honoured[f"{ARR}.{_role}.fsdp_config.pad_to_length"] = (
            f"{_PAD_KEYS}::test_the_engine_copy_alone_applies_to_the_role_and_the_reference")
        honoured[f"{ARR}.{_role}.fsdp_config.pad_to_length_bucket"] = (
            f"{_PAD}::test_actor_log_probs_and_entropy_are_the_unpadded_ones")
    for _key in ("pad_to_length", "pad_to_length_bucket"):
        honoured[f"critic.model.fsdp_config.{_key}"] = f"{_PAD}::test_critic_values_and_update_are_the_unpadded_ones"
        honoured[f"reward_model.model.fsdp_config.{_key}"] = (
            "tests/workers/reward_model/test_reward_model_worker.py::test_model_keys_reach_the_worker")

    # upstream's current rollout_skip spelling (verl-project/verl): one setting with dump_step / post_dump_action
    _SKIP = "tests/trainer/ppo/test_rollout_skip_trainer.py::test_upstreams_current_spelling_max_dump_step_and_action"
    honoured[f"{ARR}.rollout.skip.max_dump_step"] = _SKIP
    honoured[f"{ARR}.rollout.skip.action"] = _SKIP

    # later upstream's place of the critic's engine: each leaf settled with critic.model.fsdp_config (whose effect tests
    # are above) before typing
    honoured |= {key.replace("critic.model.fsdp_config.", "critic.fsdp.", 1):
                 "tests/trainer/config/test_critic_fsdp.py::test_either_place_sets_the_engine_the_critic_worker_reads"
                 for key in list(honoured) if key.startswith("critic.model.fsdp_config.")}

    # later upstream's v1-trainer switch and mode: both values of use_v1 and trainer_mode=sync run this build's one trainer
    _MORE = "tests/trainer/config/test_post_v07_keys_more.py"
    honoured["trainer.use_v1"] = f"{_MORE}::test_use_v1_either_value_runs_the_one_trainer_with_a_note_for_false"
    honoured["trainer.v1.trainer_mode"] = f"{_MORE}::test_v1_trainer_mode_sync_is_accepted_and_async_modes_are_refused"
    # later upstream's profiler finish hook (each role follows global_profiler's) and relocate_results (a note)
    for _prefix in ("global_profiler", f"{ARR}.actor.profiler", f"{ARR}.ref.profiler", f"{ARR}.rollout.profiler",
                    "critic.profiler"):
        honoured[f"{_prefix}.finish_hook_cmd"] = f"{_MORE}::test_a_worker_runs_its_roles_hook_after_its_trace_is_written"
        honoured[f"{_prefix}.finish_hook_all_ranks"] = f"{_MORE}::test_the_finish_hook_runs_on_the_selected_ranks_only"
        honoured[f"{_prefix}.finish_hook_ranks"] = f"{_MORE}::test_the_finish_hook_runs_on_the_selected_ranks_only"
        honoured[f"{_prefix}.relocate_results"] = f"{_MORE}::test_relocate_results_is_accepted_with_a_note"
