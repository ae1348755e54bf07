"""examples/data_preprocess/gsm8k_multiturn_w_tool.py on a small GSM8K-layout fixture: upstream's row layout, and
rows the tool and the interaction accept as they are."""

import asyncio
import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl.interactions.utils.interaction_registry import initialize_interactions_from_config
from verl.rewards import default_compute_score
from verl.tools.utils.tool_registry import initialize_tools_from_config

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "data_preprocess" / "gsm8k_multiturn_w_tool.py"
CONFIG = ROOT / "examples" / "sglang_multiturn" / "config"

ROWS = {
    "train": [
        {"question": "Tom has 3 boxes of 4 pens. How many pens?", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"},
        {"question": "A car costs 1,200 dollars plus 300. Total?", "answer": "1200 + 300 = 1500\n#### 1,500"},
    ],
    "test": [{"question": "What is 7 - 9?", "answer": "7 - 9 = -2\n#### -2"}],
}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("preprocess_gsm8k_multiturn_w_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def converted(script, tmp_path):
    source = tmp_path / "gsm8k" / "main"  # the hub repository's layout
    source.mkdir(parents=True)
    for split, rows in ROWS.items():
        pq.write_table(pa.Table.from_pylist(rows), str(source / f"{split}-00000-of-00001.parquet"))
    train_path, test_path = script.main(["--local_dataset_path", str(source.parent),
                                         "--local_save_dir", str(tmp_path / "out")])
    return pq.read_table(train_path).to_pylist(), pq.read_table(test_path).to_pylist()


def test_rows_have_upstreams_layout(converted):
    train, test = converted
    assert len(train) == 2 and len(test) == 1
    row = train[1]
    assert set(row) == {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}
    assert (row["data_source"], row["agent_name"], row["ability"]) == ("openai/gsm8k", "tool_agent", "math")
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1500"}
    system, user = row["prompt"]
    assert system["role"] == "system" and "`calc_gsm8k_reward` tool" in system["content"]
    assert "Put your final answer in the format of `#### <answer>`." in system["content"]
    question = "A car costs 1,200 dollars plus 300. Total? " \
               "Let's think step by step and output the final answer after `####`."
    assert user == {"role": "user", "content": question}
    assert row["extra_info"] == {
        "split": "train",
        "index": 1,
        "answer": ROWS["train"][1]["answer"],
        "question": ROWS["train"][1]["question"],
        "need_tools_kwargs": True,
        "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "1500"}}},
        "interaction_kwargs": {"name": "gsm8k", "query": question, "ground_truth": "1500"},
    }
    assert test[0]["extra_info"]["split"] == "test" and test[0]["reward_model"]["ground_truth"] == "-2"
    assert default_compute_score(row["data_source"], "so #### 1500", row["reward_model"]["ground_truth"]) == 1.0


def test_rows_drive_the_bundled_tool_and_interaction(converted):
    row = converted[0][0]
    (tool,) = initialize_tools_from_config(str(CONFIG / "tool_config" / "gsm8k_tool_config.yaml"))
    interactions = initialize_interactions_from_config(
        str(CONFIG / "interaction_config" / "gsm8k_interaction_config.yaml"))
    kwargs = row["extra_info"]

    async def episode():
        iid, _ = await tool.create(**kwargs["tools_kwargs"][tool.name]["create_kwargs"])
        response, _, _ = await tool.execute(iid, {"answer": "12"})
        interaction = interactions[kwargs["interaction_kwargs"]["name"]]
        jid = await interaction.start_interaction(**kwargs["interaction_kwargs"])
        verdict = await interaction.generate_response(jid, [{"role": "assistant", "content": "#### 12"}])
        return response.text, verdict[0]

    assert asyncio.run(episode()) == ("Current parsed answer='12' reward=1.0", True)


def test_missing_local_split_is_reported(script, tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(FileNotFoundError, match="no 'train' split"):
        script.main(["--local_dataset_path", str(tmp_path / "src"), "--local_save_dir", str(tmp_path / "out")])
