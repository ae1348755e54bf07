"""Write a small GSM8K-layout stand-in (question / answer ending in "#### N") for machines without the dataset.

    python examples/data_preprocess/gsm8k_layout_sample.py --out ~/datasets/gsm8k_sample
    python examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dataset_path ~/datasets/gsm8k_sample \
        --local_save_dir ~/data/gsm8k_multiturn

The problems are generated word problems with GSM8K's columns and answer format, so the preprocess scripts and the
multi-turn GSM8K recipe run end to end offline; use the real openai/gsm8k copy for real training.
"""

from __future__ import annotations

import argparse
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

NAMES = ["Tom", "Mia", "Ravi", "Lena", "Omar", "Sofia", "Ken", "Ada"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies"]


def problem(rng: random.Random) -> dict[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(1, 20)
    total = a * b - c
    question = (f"{name} buys {b} boxes of {item} with {a} {item} in each box, then gives away {c} {item}. "
                f"How many {item} does {name} have now?")
    answer = f"{name} buys {b} * {a} = <<{b}*{a}={a * b}>>{a * b} {item}.\n" \
             f"After giving away {c}: {a * b} - {c} = <<{a * b}-{c}={total}>>{total}.\n#### {total}"
    return {"question": question, "answer": answer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write train.parquet and test.parquet into")
    parser.add_argument("--train_size", type=int, default=256)
    parser.add_argument("--test_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = os.path.expanduser(args.out)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(args.seed)
    for split, size in (("train", args.train_size), ("test", args.test_size)):
        rows = [problem(rng) for _ in range(size)]
        pq.write_table(pa.Table.from_pylist(rows), os.path.join(out, f"{split}.parquet"))
        print(f"wrote {size} {split} rows to {os.path.join(out, split + '.parquet')}")


if __name__ == "__main__":
    main()
