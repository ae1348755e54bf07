"""Convert the MATH benchmark (DigitalLearningGmbH/MATH-lighteval) to verl parquet files.

    python examples/data_preprocess/math_dataset.py --local_dataset_path ~/datasets/MATH-lighteval --local_save_dir ~/data/math

--local_dataset_path is a folder with train.parquet/test.parquet, or a copy of the hub repository
(<config>/train-00000-of-00001.parquet, <config>/test-00000-of-00001.parquet). Rows hold `problem` and
`solution`; the ground truth is the content of the solution's last \\boxed{}.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import datasets

from verl.data.parquet_files import add_save_dir_args, find_split_file, read_parquet_files, write_splits
from verl.rewards.math_normalize import extract_boxed_answer

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def extract_solution(solution: str) -> str:
    answer = extract_boxed_answer(solution)
    if answer is None:
        raise ValueError(f"MATH solution has no \\boxed{{}} answer: {solution[-200:]!r}")
    return answer


def to_row(example: dict, split: str, index: int) -> dict:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{example['problem']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(example["solution"])},
        "extra_info": {"split": split, "index": index},
    }


def load_splits(local_dataset_path: str | None) -> dict[str, datasets.Dataset]:
    if local_dataset_path:
        return {
            split: read_parquet_files(
                [find_split_file(local_dataset_path, split)],
                required_column="problem",
                column_hint="MATH rows need problem and solution columns.",
                files_key="--local_dataset_path",
            )
            for split in ("train", "test")
        }
    try:
        loaded = datasets.load_dataset(DATA_SOURCE)
    except Exception as exc:
        raise RuntimeError(
            f"could not download {DATA_SOURCE} ({exc}); pass --local_dataset_path to a local copy"
        ) from exc
    return {"train": loaded["train"], "test": loaded["test"]}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", default=None, help="local copy of the MATH dataset")
    add_save_dir_args(parser, "~/data/math")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    return write_splits(args, ((split, [to_row(example, split, i) for i, example in enumerate(source)])
                               for split, source in load_splits(args.local_dataset_path).items()))


if __name__ == "__main__":
    main()
