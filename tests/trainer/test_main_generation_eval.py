"""main_generation -> main_eval on a tiny model, and the pass@k arithmetic of main_eval checked by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
from hydra import compose, initialize_config_dir

from tests.trainer.sft.sft_helpers import load_example, save_tiny_model
from verl.trainer.main_eval import pass_at_k, run_eval, validate_eval_config
from verl.trainer.main_generation import run_generation, validate_generation_config
from verl.trainer.sft.argv import CONFIG_DIR
from verl.utils.config_errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen_eval")
    model_dir = save_tiny_model(root / "model", seed=1, initializer_range=0.3)
    _, test = load_example("arithmetic_sft").main(
        ["--local_save_dir", str(root / "data"), "--train_size", "1", "--test_size", "6", "--no_fewshot"])
    return root, str(model_dir), test


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name, overrides=overrides)


def generate(model_dir, data_path, out, *overrides):
    config = compose_config("generation", [f"model.path={model_dir}", f"data.path={data_path}",
                                           f"data.output_path={out}", "data.batch_size=4",
                                           "rollout.response_length=12", *overrides])
    path = run_generation(validate_generation_config(config))
    assert not dist.is_initialized()  # the in-process worker's group is torn down again
    return path


def test_greedy_generation_matches_hf_generate(setup):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, model_dir, data = setup
    # fp32 compute: compared token for token with HF's fp32 generate (the default is the hardware's dtype)
    out = generate(model_dir, data, root / "greedy.parquet", "rollout.do_sample=false", "rollout.temperature=0",
                   "actor.fsdp_config.mixed_precision.param_dtype=fp32")
    rows = pq.read_table(out).to_pylist()
    source = pq.read_table(data).to_pylist()
    assert len(rows) == 6 and all(len(r["responses"]) == 1 for r in rows)
    assert len({r["responses"][0] for r in rows}) > 1  # a model that says the same thing everywhere proves little
    assert [{k: v for k, v in r.items() if k != "responses"} for r in rows] == source  # input rows kept as they were
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for row in rows[:2]:
        text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
        with torch.no_grad():
            expected = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                      pad_token_id=tokenizer.pad_token_id)
        assert row["responses"][0] == tokenizer.decode(expected[0, ids.size(1):], skip_special_tokens=True)


def test_sampled_generation_then_eval_round_trip(setup, capsys):
    root, model_dir, data = setup
    out = generate(model_dir, data, root / "sampled.parquet", "data.n_samples=3", "rollout.temperature=1.0")
    rows = pq.read_table(out).to_pylist()
    assert all(len(r["responses"]) == 3 and all(isinstance(s, str) for s in r["responses"]) for r in rows)
    reward = root / "reward.py"
    # rewards the even-indexed rows whatever they say: the expected numbers are known in advance
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float(extra_info['index'] % 2 == 0)\n")
    config = compose_config("evaluation", [f"data.path={out}", f"custom_reward_function.path={reward}",
                                           f"data.output_path={root / 'eval.json'}"])
    report = run_eval(validate_eval_config(config))
    metrics = report["per_data_source"]["arithmetic"]
    assert metrics["num_prompts"] == 6 and metrics["samples_per_prompt"] == 3
    assert metrics["test_score"] == pytest.approx(0.5)
    assert metrics["pass@1"] == pytest.approx(0.5) and metrics["pass@2"] == pytest.approx(0.5)
    assert metrics["pass@3"] == pytest.approx(0.5)
    assert json.loads((root / "eval.json").read_text())["metrics"]["pass@1/arithmetic"] == pytest.approx(0.5)
    assert report["validation_metrics"]["val-core/arithmetic/reward/mean@3"] == pytest.approx(0.5)
    table = capsys.readouterr().out
    assert "data_source" in table and "pass@3" in table and "arithmetic" in table


def test_pass_at_k_by_hand(tmp_path):
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(3, 0, 3) == 0.0 and pass_at_k(3, 1, 3) == 1.0
    rows = [
        {"data_source": "arithmetic", "reward_model": {"ground_truth": "14"},
         "responses": ["10 + 4 = 14. #### 14", "#### 3", "fourteen"]},
        {"data_source": "arithmetic", "reward_model": {"ground_truth": "7"}, "responses": ["#### 8", "", "7"]},
        {"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "5"}, "responses": ["#### 5", "#### 5", "x"]},
    ]
    path = tmp_path / "gen.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    report = run_eval(validate_eval_config(compose_config("evaluation", [f"data.path={path}"])))
    arith = report["per_data_source"]["arithmetic"]
    # prompt 1: c=1 of 3; prompt 2: c=0 of 3
    assert arith["test_score"] == pytest.approx(1 / 6)
    assert arith["pass@1"] == pytest.approx((1 / 3 + 0) / 2)
    assert arith["pass@2"] == pytest.approx((2 / 3 + 0) / 2)
    assert arith["pass@3"] == pytest.approx((1 + 0) / 2)
    gsm = report["per_data_source"]["openai/gsm8k"]
    assert gsm["pass@1"] == pytest.approx(2 / 3) and gsm["pass@2"] == pytest.approx(1.0)
    assert (tmp_path / "gen.eval.json").exists()  # the default output path sits next to the input


def test_config_checks_name_keys(setup, tmp_path):
    root, model_dir, data = setup
    config = compose_config("generation", [f"data.path={tmp_path / 'nope.parquet'}", "data.n_samples=4",
                                           "rollout.temperature=0"])
    with pytest.raises(ConfigError) as err:
        validate_generation_config(config)
    assert "data.path" in str(err.value) and "data.n_samples=4 with greedy decoding" in str(err.value)
    with pytest.raises(ConfigError, match=r"'responses' \(data.response_key\)"):
        validate_eval_config(compose_config("evaluation", [f"data.path={data}"]))


def test_eval_command_line(tmp_path):
    rows = [{"data_source": "arithmetic", "reward_model": {"ground_truth": "3"}, "responses": ["#### 3"]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    done = subprocess.run([sys.executable, "-m", "verl.trainer.main_eval", f"data.path={tmp_path / 'g.parquet'}",
                           f"data.output_path={tmp_path / 'out.json'}"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "arithmetic" in done.stdout and json.loads((tmp_path / "out.json").read_text())["metrics"] == {
        "test_score/arithmetic": 1.0, "pass@1/arithmetic": 1.0}
    typo = subprocess.run([sys.executable, "-m", "verl.trainer.main_eval", "data.respons_key=x"], cwd=tmp_path,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert typo.returncode == 2 and "Did you mean 'data.response_key'" in typo.stderr


def test_eval_reads_a_reward_result_as_its_score_and_acc():
    """A compute_score returning upstream's RewardResult scores like the dict it stands for."""
    from verl.trainer.config.evaluation import EvaluationConfig
    from verl.trainer.main_eval import score_table
    from verl.utils.reward_score.result import RewardResult

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        right = solution_str.strip() == ground_truth
        return RewardResult(score=0.9 if right else 0.2, metrics={"acc": right})

    rows = [{"data_source": "toy", "responses": ["4", "5"], "reward_model": {"ground_truth": "4"}}]
    (prompt,) = score_table(rows, EvaluationConfig(), compute_score)
    assert prompt.scores == [0.9, 0.2] and prompt.correct == [True, False]
