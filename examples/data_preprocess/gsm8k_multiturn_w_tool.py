"""Convert GSM8K (openai/gsm8k, config "main") to verl parquet files for multi-turn rollout with the
calc_gsm8k_reward tool (examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml).

    python examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dataset_path ~/datasets/gsm8k \
        --local_save_dir ~/data/gsm8k_multiturn

Same flags and the same local copy as gsm8k.py: --local_dataset_path is a folder with train.parquet/test.parquet,
or a copy of the hub repository (main/train-00000-of-00001.parquet, ...). Without it the script asks the Hugging
Face hub, which needs network access.

Each row carries what the tool agent loop needs: agent_name "tool_agent", the tool's create_kwargs
(extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth) and the interaction's kwargs
(extra_info.interaction_kwargs, with name "gsm8k" for gsm8k_interaction_config.yaml).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

from verl.data.parquet_files import write_splits


def _load_gsm8k_script():
    # The single-turn script owns reading GSM8K (flags, local layouts, errors); this one only shapes the rows.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gsm8k.py")
    spec = importlib.util.spec_from_file_location("_verl_example_gsm8k_preprocess", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gsm8k = _load_gsm8k_script()

DATA_SOURCE = "openai/gsm8k"
AGENT_NAME = "tool_agent"
TOOL_NAME = "calc_gsm8k_reward"
INTERACTION_NAME = "gsm8k"
INSTRUCTION = "Let's think step by step and output the final answer after `####`."
SYSTEM_PROMPT = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "Reasoning step by step before any tool call. "
    f"You should use the `{TOOL_NAME}` tool after step by step solving the question, "
    "before generate final answer at least once and refine your answer if necessary. "
    "Put your final answer in the format of `#### <answer>`."
)


def to_row(example: dict, split: str, index: int) -> dict:
    question_raw = example["question"]
    question = f"{question_raw} {INSTRUCTION}"
    solution = _gsm8k.extract_solution(example["answer"])
    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_NAME,
        "prompt": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": solution},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": example["answer"],
            "question": question_raw,
            "need_tools_kwargs": True,
            "tools_kwargs": {TOOL_NAME: {"create_kwargs": {"ground_truth": solution}}},
            "interaction_kwargs": {"name": INTERACTION_NAME, "query": question, "ground_truth": solution},
        },
    }


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = _gsm8k.parse_args(argv)
    paths = write_splits(args, ((split, [to_row(example, split, i) for i, example in enumerate(source)])
                                for split, source in _gsm8k.load_splits(args.local_dataset_path).items()))
    return paths[0], paths[1]


if __name__ == "__main__":
    main()
