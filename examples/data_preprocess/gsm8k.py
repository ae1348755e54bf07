"""Convert GSM8K (openai/gsm8k, config "main") to verl parquet files.

    python examples/data_preprocess/gsm8k.py --local_dataset_path ~/datasets/gsm8k --local_save_dir ~/data/gsm8k

--local_dataset_path is a folder with train.parquet/test.parquet, or a copy of the hub repository
(main/train-00000-of-00001.parquet, main/test-00000-of-00001.parquet). Without it the script asks the
Hugging Face hub, which needs network access.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import datasets

from verl.data.parquet_files import add_save_dir_args, find_split_file, read_parquet_files, write_splits

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_ANSWER_PATTERN = re.compile(r"#### (-?[0-9.,]+)")


def extract_solution(answer: str) -> str:
    """The number after `####` in a GSM8K answer, commas removed."""
    match = _ANSWER_PATTERN.search(answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-200:]!r}")
    return match.group(1).replace(",", "")


def to_row(example: dict, split: str, index: int) -> dict:
    question = example["question"]
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["answer"])},
        "extra_info": {"split": split, "index": index, "answer": example["answer"], "question": question},
    }


def load_splits(local_dataset_path: str | None) -> dict[str, datasets.Dataset]:
    if local_dataset_path:
        return {
            split: read_parquet_files(
                [find_split_file(local_dataset_path, split)],
                required_column="question",
                column_hint="openai/gsm8k rows need question and answer columns.",
                files_key="--local_dataset_path",
            )
            for split in ("train", "test")
        }
    try:
        loaded = datasets.load_dataset(DATA_SOURCE, "main")
    except Exception as exc:
        raise RuntimeError(
            f"could not download {DATA_SOURCE} ({exc}); pass --local_dataset_path to a local copy"
        ) from exc
    return {"train": loaded["train"], "test": loaded["test"]}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", default=None, help="local copy of openai/gsm8k")
    add_save_dir_args(parser, "~/data/gsm8k")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    return write_splits(args, ((split, [to_row(example, split, i) for i, example in enumerate(source)])
                               for split, source in load_splits(args.local_dataset_path).items()))


if __name__ == "__main__":
    main()
