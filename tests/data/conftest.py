import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer


def make_row(content: str, index: int, truth: str = "7", source: str = "arithmetic") -> dict:
    return {
        "data_source": source,
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": "train", "index": index},
    }


def write_rows(path, rows) -> str:
    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


@pytest.fixture
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture
def parquet_file(tmp_path):
    rows = [make_row(f"Tom has {i} apples.", index=100 + i, truth=str(i)) for i in range(6)]
    return write_rows(tmp_path / "train.parquet", rows)
