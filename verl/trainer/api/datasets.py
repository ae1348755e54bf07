"""train_data / val_data -> parquet files the data check and the RL dataset read exactly as files from the CLI.

Accepted: a parquet path (or a list of paths), a list of row dicts (upstream's row format: data_source, prompt
(chat messages), reward_model.ground_truth, extra_info), or a Hugging Face `datasets.Dataset`. Rows and datasets
are written to `<trainer.default_local_dir>/data/<split>.parquet`, so the run's folder holds what it trained on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from verl.trainer.config import ConfigError

DataLike = str | os.PathLike | Sequence[Any] | Any


def _is_paths(data: Any) -> bool:
    if isinstance(data, str | os.PathLike):
        return True
    return isinstance(data, list | tuple) and bool(data) and all(isinstance(p, str | os.PathLike) for p in data)


def materialize(data: DataLike, split: str, run_dir: str) -> list[str]:
    """The parquet file(s) holding `data`; `split` is 'train' or 'val' (named in errors as train_data/val_data)."""
    arg = f"{split}_data"
    if _is_paths(data):
        paths = [data] if isinstance(data, str | os.PathLike) else list(data)
        return [os.fspath(p) for p in paths]  # existence is checked with the config (data.<split>_files)
    out = os.path.join(os.path.abspath(os.path.expanduser(run_dir)), "data", f"{split}.parquet")
    if hasattr(data, "to_parquet") and hasattr(data, "column_names"):  # datasets.Dataset, without importing it
        os.makedirs(os.path.dirname(out), exist_ok=True)
        data.to_parquet(out)
        return [out]
    if isinstance(data, list | tuple):
        if not data:
            raise ConfigError(f"{arg}=[] has no rows; give at least one batch of prompts (data.train_batch_size)")
        bad = [i for i, row in enumerate(data) if not isinstance(row, Mapping)]
        if bad:
            raise ConfigError(f"{arg}: rows {bad[:5]} are not dicts; give a list of row dicts (data_source, prompt, "
                              "reward_model, extra_info), a parquet path or a datasets.Dataset")
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pa.Table.from_pylist([dict(row) for row in data])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise ConfigError(f"{arg}: the rows do not form one table ({err}); give every row the same columns "
                              "with the same types") from err
        os.makedirs(os.path.dirname(out), exist_ok=True)
        pq.write_table(table, out)
        return [out]
    raise ConfigError(f"{arg}: expected a parquet path, a list of paths, a list of row dicts or a datasets.Dataset; "
                      f"got {type(data).__name__}")
