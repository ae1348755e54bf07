"""What the data check before Ray (verl/data/data_check.py) costs on a large train file.

    .venv/bin/python benchmarks/data_check.py                 # 100k rows, the default model's tokenizer

Writes a verl-format parquet file of --rows GSM8K-sized rows (chat prompt, data_source, reward_model.ground_truth)
in a temporary folder, then times, in this one process:
    read_s        reading the file's prompt, data_source and reward_model columns with pyarrow (baseline 1)
    tokenize_s    tokenizing every prompt's text without the chat template (baseline 2)
    check_s       the whole check: columns, ground truth, data_source scorers, every prompt rendered with the chat
                  template and tokenized, measured against data.max_prompt_length
Prints each, and check_s as a ratio of each baseline; the target is check_s under 30 s for 100k rows.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from verl.data.data_check import RowNeeds, check_split
from verl.trainer.config import DataConfig
from verl.trainer.ppo.data_check import has_builtin_scorer

WORDS = ("Natalia sold clips to 48 of her friends in April and then she sold half as many clips in May How many "
         "did sell altogether Weng earns 12 an hour for babysitting Yesterday just did 50 minutes much she earn "
         "Let's think step by step and output the final answer after").split()


def write_rows(path: Path, rows: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    questions = [" ".join(rng.choices(WORDS, k=rng.randint(30, 90))) for _ in range(rows)]
    table = pa.table({
        "data_source": ["openai/gsm8k"] * rows,
        "prompt": [[{"role": "user", "content": q}] for q in questions],
        "ability": ["math"] * rows,
        "reward_model": [{"style": "rule", "ground_truth": str(i % 97)} for i in range(rows)],
        "extra_info": [{"split": "train", "index": i} for i in range(rows)],
    })
    pq.write_table(table, str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder; default: the bundled default model's")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from verl.utils.default_model import default_model_path

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or default_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.parquet"
        write_rows(path, args.rows)
        print(f"rows: {args.rows} ({path.stat().st_size / 2**20:.1f} MiB parquet)")

        start = time.perf_counter()
        table = pq.read_table(str(path), columns=["prompt", "data_source", "reward_model"])
        texts = [messages[0]["content"] for messages in table.column("prompt").to_pylist()]
        read_s = time.perf_counter() - start

        start = time.perf_counter()
        for i in range(0, len(texts), 1024):
            tokenizer(texts[i:i + 1024], add_special_tokens=False)
        tokenize_s = time.perf_counter() - start

        config = DataConfig(max_prompt_length=512, shuffle=False)
        start = time.perf_counter()
        report = check_split("data.train_files", [str(path)], config, tokenizer, RowNeeds(has_scorer=has_builtin_scorer))
        check_s = time.perf_counter() - start
        assert report.problems == [] and report.rows == args.rows, report.problems

    print(f"read_s: {read_s:.2f}")
    print(f"tokenize_s: {tokenize_s:.2f}")
    print(f"check_s: {check_s:.2f}")
    print(f"check_vs_read: {check_s / read_s:.1f}x")
    print(f"check_vs_tokenize: {check_s / tokenize_s:.1f}x")
    print(f"under_30s: {check_s < 30}")


if __name__ == "__main__":
    main()
