"""Effect tests of actor_rollout_ref.model.hf_config_path / tokenizer_path, actor_rollout_ref.ref.model and
data.datagen.{path,name} (upstream's HFModelConfig fields, reference-model section and dynamic data generation)."""

from __future__ import annotations

import copy
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.helpers.tiny_model import save_tiny_model_dir, tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.trainer.config.test_key_effects import typed
from tests.trainer.ppo.test_trainer_keys import tokenizer  # noqa: F401 (fixture)
from verl.trainer.config import ConfigError

ARR = "actor_rollout_ref"
OTHER_TEMPLATE = "{% for message in messages %}{{ 'OTHER ' + message['content'] + '\n' }}{% endfor %}"
ROPE_THETA = 1234.0


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """model: tiny Llama + tokenizer; config: only a config.json whose rope_theta differs; tokenizer: only a
    tokenizer whose chat template differs; ref: another tiny Llama (other weights) + the same tokenizer."""
    root = tmp_path_factory.mktemp("paths")
    model = save_tiny_model_dir(root / "model")
    config_dir = root / "config"
    config_dir.mkdir()
    hf_config = json.loads((root / "model" / "config.json").read_text())
    assert hf_config.get("rope_theta", hf_config.get("rope_parameters", {}).get("rope_theta")) != ROPE_THETA
    hf_config["rope_theta"] = ROPE_THETA
    hf_config.get("rope_parameters", {}).update(rope_theta=ROPE_THETA)
    (config_dir / "config.json").write_text(json.dumps(hf_config))
    other = copy.deepcopy(build_tiny_tokenizer())
    other.chat_template = OTHER_TEMPLATE
    other.save_pretrained(root / "tokenizer")
    tiny_llama(seed=7).save_pretrained(root / "ref")
    build_tiny_tokenizer().save_pretrained(root / "ref")
    return {"model": model, "config": str(config_dir), "tokenizer": str(root / "tokenizer"), "ref": str(root / "ref")}


def _rope_theta(config) -> float:
    return float(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"])


# -- hf_config_path ---------------------------------------------------------------------------------------------


def test_hf_config_path_builds_the_model_from_that_config_with_the_weights_of_path(folders):
    from transformers import AutoModelForCausalLM

    from verl.models.loader import load_causal_lm

    plain, _ = load_causal_lm(typed(f"{ARR}.model.path={folders['model']}").actor_rollout_ref.model, f"{ARR}.model")
    cfg = typed(f"{ARR}.model.path={folders['model']}", f"{ARR}.model.hf_config_path={folders['config']}")
    module, path = load_causal_lm(cfg.actor_rollout_ref.model, f"{ARR}.model")
    assert path == folders["model"]
    assert _rope_theta(module.config) == ROPE_THETA != _rope_theta(plain.config)
    saved = AutoModelForCausalLM.from_pretrained(folders["model"]).state_dict()
    for name, tensor in module.state_dict().items():  # the weights are still the model folder's
        if name in saved:
            torch.testing.assert_close(tensor, saved[name])
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    assert not torch.allclose(module(ids).logits, plain(ids).logits)  # rope_theta changes the positions' encoding


def test_hf_config_path_missing_folder_names_the_key(folders, tmp_path):
    from verl.models.loader import load_causal_lm

    cfg = typed(f"{ARR}.model.path={folders['model']}", f"{ARR}.model.hf_config_path={tmp_path / 'none'}")
    with pytest.raises(FileNotFoundError, match=f"{ARR}.model.hf_config_path"):
        load_causal_lm(cfg.actor_rollout_ref.model, f"{ARR}.model")


@pytest.mark.parametrize("key", ["hf_config_path", "tokenizer_path"])
def test_separate_config_or_tokenizer_folder_is_refused_with_vllm(key):
    with pytest.raises(ConfigError) as info:
        typed(f"{ARR}.model.{key}=/tmp", f"{ARR}.rollout.name=vllm")
    assert any(p.startswith(f"{ARR}.model.{key}=") and "rollout.name=vllm" in p for p in info.value.problems)


# -- tokenizer_path: the driver ---------------------------------------------------------------------------------


def test_tokenizer_path_is_the_drivers_tokenizer(folders, tmp_path, monkeypatch):
    from tests.trainer.config.test_key_effects import _launch_with_stubs
    from verl.models import loader

    loaded = []
    real = loader.load_tokenizer

    def spy(path, key, **kwargs):
        loaded.append((path, key, real(path, key, **kwargs)))
        return loaded[-1][2]

    monkeypatch.setattr(loader, "load_tokenizer", spy)
    _launch_with_stubs(monkeypatch, tmp_path, folders["model"], f"{ARR}.model.tokenizer_path={folders['tokenizer']}")
    path, key, loaded_tokenizer = loaded[0]
    assert (path, key) == (folders["tokenizer"], f"{ARR}.model.tokenizer_path")
    assert loaded_tokenizer.chat_template == OTHER_TEMPLATE


# -- tokenizer_path, hf_config_path and ref.model in the workers -------------------------------------------------


def _workers(rank: int, port: int, folders: dict, results) -> None:
    """An actor+rollout worker with hf_config_path and tokenizer_path set, and a reference worker with
    ref.model.path: report what each built."""
    import torch.distributed as dist

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # the perf probe is not what is tested here
    try:
        config = typed(f"{ARR}.model.path={folders['model']}", f"{ARR}.model.hf_config_path={folders['config']}",
                       f"{ARR}.model.tokenizer_path={folders['tokenizer']}", f"+{ARR}.ref.model.path={folders['ref']}",
                       f"{ARR}.rollout.name=hf", f"{ARR}.rollout.mode=sync", f"critic.model.path={folders['model']}")
        actor = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout")
        actor.init_model()
        ref = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "ref")
        ref.init_model()
        weights = {}
        for name, param in ref.ref_module.named_parameters():
            full = param.full_tensor() if hasattr(param, "full_tensor") else param  # one rank: the whole tensor
            weights[name] = full.detach().float().clone()
        results["ref_weights"] = weights
        results["actor_rope_theta"] = _rope_theta(actor.actor_module.config)
        results["ref_rope_theta"] = _rope_theta(ref.ref_module.config)
        results["actor_template"] = actor.tokenizer.chat_template
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(200)
def test_workers_honour_hf_config_path_tokenizer_path_and_ref_model(folders):
    from transformers import AutoModelForCausalLM

    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_workers, free_port(), folders, nprocs=1, timeout_s=180)
    assert results["actor_rope_theta"] == ROPE_THETA  # model.hf_config_path
    assert results["actor_template"] == OTHER_TEMPLATE  # model.tokenizer_path
    # ref.model.path: the reference folder's weights and its own config (not the actor's hf_config_path)
    assert results["ref_rope_theta"] != ROPE_THETA
    want = AutoModelForCausalLM.from_pretrained(folders["ref"]).float().state_dict()
    actor = AutoModelForCausalLM.from_pretrained(folders["model"]).float().state_dict()
    assert len(results["ref_weights"]) > 0
    for name, tensor in results["ref_weights"].items():
        torch.testing.assert_close(tensor, want[name])
        assert not torch.equal(tensor, actor[name]) or name.endswith("norm.weight")  # norms start at ones


def test_ref_model_keys_other_than_path_and_with_lora_are_refused():
    with pytest.raises(ConfigError) as info:
        typed(f"{ARR}.ref.model={{path:/tmp,dtype:bf16}}")
    assert any(p.startswith(f"{ARR}.ref.model.dtype is refused") for p in info.value.problems)
    with pytest.raises(ConfigError) as info:
        typed(f"{ARR}.ref.model={{path:/tmp}}", f"{ARR}.model.lora_rank=4")
    assert any("lora_rank > 0" in p and p.startswith(f"{ARR}.ref.model.path=") for p in info.value.problems)
    with pytest.raises(ConfigError) as info:
        typed(f"{ARR}.ref.model={{}}")
    assert any(p.startswith(f"{ARR}.ref.model.path is not set") for p in info.value.problems)
    assert typed().actor_rollout_ref.ref.model is None


# -- data.datagen ----------------------------------------------------------------------------------------------

GENERATOR = '''
import datasets

from verl.experimental.dynamic_dataset.dynamicgen_dataset import AbstractDataGenerator


class Doubler(AbstractDataGenerator):
    """Each call adds one row: the last prompt with its number doubled (the section's `path` is recorded)."""

    calls = []

    def generate(self, dataset):
        Doubler.calls.append(self.config.name)
        last = dataset.dataframe[len(dataset.dataframe) - 1]
        n = int(last["prompt"][0]["content"].split()[1]) * 2
        return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"Compute {n} + 1."}],
                                            "data_source": "arithmetic"}])


class NotAGenerator:
    pass
'''


@pytest.fixture()
def datagen_files(tmp_path):
    data = tmp_path / "train.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in (1, 3)],
                             "data_source": ["arithmetic"] * 2}), data)
    gen = tmp_path / "gen.py"
    gen.write_text(GENERATOR)
    return str(data), str(gen)


def _dataset(data: str, *overrides: str):
    from verl.data.rl_loading import create_rl_dataset

    cfg = typed(f"data.train_files=[{data}]", *overrides)
    return create_rl_dataset(cfg.data.train_files, cfg.data, build_tiny_tokenizer(), max_samples=-1)


DYNAMIC = ("data.custom_cls.path=pkg://verl.experimental.dynamic_dataset.dynamicgen_dataset",
           "data.custom_cls.name=DynamicGenDataset")


def test_datagen_adds_the_generators_rows_when_built_and_after_every_step(datagen_files):
    data, gen = datagen_files
    dataset = _dataset(data, *DYNAMIC, f"data.datagen.path={gen}", "data.datagen.name=Doubler")
    prompts = lambda: [row["prompt"][0]["content"] for row in dataset.dataframe]  # noqa: E731
    assert prompts() == ["Compute 1 + 1.", "Compute 3 + 1.", "Compute 6 + 1."]  # one generate() when built
    dataset.on_batch_end(batch=None)
    assert prompts()[-1] == "Compute 12 + 1." and len(dataset) == 4
    assert "Compute 12 + 1." in dataset.tokenizer.decode(dataset[3]["input_ids"][dataset[3]["attention_mask"] > 0])


def test_the_trainer_hands_every_trained_batch_to_the_datasets_on_batch_end(tokenizer):  # noqa: F811 (fixture)
    from tests.trainer.ppo.test_async_reward_step import ROWS, _ActorGroup, _batch_dict, _CriticGroup, _Pools
    from tests.trainer.ppo.test_trainer_keys import make_trainer
    from tests.workers.reward_manager.conftest import make_batch
    from verl.trainer.ppo.reward import load_reward_manager

    seen = []

    class _Dataset:  # what DynamicGenDataset offers the trainer
        def on_batch_end(self, batch):
            seen.append((list(calls), batch))

    class _Loader:
        dataset = _Dataset()

    calls: list[str] = []
    rollout, _ = make_batch(tokenizer, ROWS)
    rollout.batch["response_mask"] = rollout.batch["attention_mask"][:, rollout.batch["prompts"].shape[1]:]
    trainer = make_trainer(tokenizer=tokenizer)
    trainer.reward_fn = load_reward_manager(trainer.config, tokenizer, num_examine=0)
    trainer.actor_rollout_wg, trainer.critic_wg = _ActorGroup(rollout, calls), _CriticGroup(calls)
    trainer.resource_pool_manager, trainer.train_dataloader = _Pools(), _Loader()
    trainer.global_steps = 1
    trainer.train_step(_batch_dict(rollout))
    (calls_then, batch), = seen
    assert calls_then[-1] == "update_actor"  # after the step's updates, once
    assert torch.equal(batch.batch["responses"], rollout.batch["responses"])  # the step's trained batch


def test_datagen_is_refused_without_dynamic_gen_dataset_and_checks_its_class(datagen_files):
    data, gen = datagen_files
    with pytest.raises(ValueError, match=r"data\.datagen\.path=.* is read only by DynamicGenDataset"):
        _dataset(data, f"data.datagen.path={gen}", "data.datagen.name=Doubler")
    with pytest.raises(TypeError, match=r"data\.datagen\.name='NotAGenerator'"):
        _dataset(data, *DYNAMIC, f"data.datagen.path={gen}", "data.datagen.name=NotAGenerator")
    with pytest.raises(ValueError, match=r"data\.datagen\.path and data\.datagen\.name must name"):
        _dataset(data, *DYNAMIC)
    with pytest.raises(ValueError, match=r"data\.dataloader_num_workers=2 with data\.datagen"):
        _dataset(data, *DYNAMIC, f"data.datagen.path={gen}", "data.datagen.name=Doubler", "data.dataloader_num_workers=2")
    with pytest.raises(AttributeError, match=r"data\.datagen\.name='Missing'"):
        _dataset(data, *DYNAMIC, f"data.datagen.path={gen}", "data.datagen.name=Missing")


@pytest.mark.parametrize("key", [f"{ARR}.model.hf_config_path", f"{ARR}.model.tokenizer_path", f"+{ARR}.ref.model.path"])
def test_a_missing_local_folder_is_refused_before_ray(key, tmp_path):
    from verl.trainer.config import load_config, validate_config

    with pytest.raises(ConfigError) as info:
        validate_config(load_config([f"{key}={tmp_path / 'none'}"]), check_files=True)
    assert any(p.startswith(f"{key.lstrip('+')}: ") and "not found" in p for p in info.value.problems)


def test_critic_hf_config_path_builds_the_value_model_from_that_config(folders):
    """critic.model.hf_config_path (later upstream's HFModelConfig for the critic): as the actor's."""
    from verl.models.loader import load_causal_lm

    base = ("algorithm.adv_estimator=gae", f"{ARR}.model.path={folders['model']}")
    plain, _ = load_causal_lm(typed(*base).critic.model, "critic.model", value_head=True)
    section = typed(*base, f"critic.model.hf_config_path={folders['config']}").critic.model
    module, path = load_causal_lm(section, "critic.model", value_head=True)
    assert path == folders["model"] and section.path == folders["model"]  # the critic follows the actor's folder
    assert _rope_theta(module.config) == ROPE_THETA != _rope_theta(plain.config)
    with pytest.raises(FileNotFoundError, match="critic.model.hf_config_path"):
        load_causal_lm(typed(*base, f"critic.model.hf_config_path={folders['config']}/none").critic.model,
                       "critic.model", value_head=True)
