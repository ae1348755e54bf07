"""Convert Geometry3K (hiyouga/geometry3k) to verl parquet files with images, as upstream's geo3k preprocess does.

    python examples/data_preprocess/geo3k.py --local_dataset_path ~/datasets/geometry3k --local_save_dir ~/data/geo3k

--local_dataset_path is a folder with train.parquet/test.parquet, or a copy of the hub repository
(data/train-00000-of-00001.parquet, data/test-00000-of-00001.parquet). Each source row has `problem` (with an
`<image>` placeholder), `answer` and `images` (a list of {"bytes": ..., "path": ...}). Without the path the script
asks the Hugging Face hub, which needs network access. Train with a vision-language model (docs/vlm.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import datasets

from verl.data.parquet_files import add_save_dir_args, find_split_file, read_parquet_files, write_splits

DATA_SOURCE = "hiyouga/geometry3k"
INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}."
)


def _image_entries(images) -> list[dict]:
    entries = []
    for image in images or []:
        if isinstance(image, dict):
            entries.append({"bytes": image.get("bytes"), "path": image.get("path")})
        else:  # a PIL image (datasets decoded it)
            import io

            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            entries.append({"bytes": buffer.getvalue(), "path": None})
    return entries


def to_row(example: dict, split: str, index: int) -> dict:
    problem = example["problem"]
    if "<image>" not in problem:  # every geo3k problem has a figure; keep the placeholder explicit
        problem = "<image>" + problem
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
        "images": _image_entries(example["images"]),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": example["answer"]},
        "extra_info": {"split": split, "index": index, "answer": example["answer"], "question": example["problem"]},
    }


def load_splits(local_dataset_path: str | None) -> dict[str, datasets.Dataset]:
    if local_dataset_path:
        return {split: read_parquet_files([find_split_file(local_dataset_path, split)], required_column="problem",
                                          column_hint="hiyouga/geometry3k rows need problem, answer and images.",
                                          files_key="--local_dataset_path")
                for split in ("train", "test")}
    try:
        loaded = datasets.load_dataset(DATA_SOURCE)
    except Exception as exc:
        raise RuntimeError(f"could not download {DATA_SOURCE} ({exc}); pass --local_dataset_path to a local copy") \
            from exc
    return {"train": loaded["train"], "test": loaded["test"]}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dataset_path", default=None, help="local copy of hiyouga/geometry3k")
    add_save_dir_args(parser, "~/data/geo3k")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> tuple[str, str]:
    args = parse_args(argv)
    return write_splits(args, ((split, [to_row(example, split, i) for i, example in enumerate(source)])
                               for split, source in load_splits(args.local_dataset_path).items()))


if __name__ == "__main__":
    main()
