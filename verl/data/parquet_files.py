"""Reading verl-format parquet files (offline, with errors that name the file), locating split files, and the
preprocess scripts' shared writing of split files."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import datasets
import pyarrow as pa
import pyarrow.parquet as pq


def _read_one(path: str, files_key: str) -> pa.Table:
    local = os.path.expanduser(path)
    if not os.path.exists(local):
        raise FileNotFoundError(f"{files_key}: parquet file {path!r} does not exist ({os.path.abspath(local)})")
    try:
        return pq.read_table(local)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"{files_key}: {path!r} is not a readable parquet file ({exc})") from exc


def read_parquet_files(
    paths: Sequence[str],
    required_column: str | None = None,
    column_hint: str = "",
    files_key: str = "data.train_files / data.val_files",
) -> datasets.Dataset:
    """One in-memory `datasets.Dataset` with the rows of every file, in order.

    Each file must hold `required_column` (else an error naming the file, its columns and `column_hint`); schemas may differ in nested fields (missing ones become None).
    """
    if not paths:
        raise ValueError(f"{files_key}: no parquet files given")
    tables = []
    for path in paths:
        table = _read_one(str(path), files_key)
        if required_column is not None and required_column not in table.column_names:
            raise ValueError(
                f"{path!r} has no column {required_column!r}; available columns: {table.column_names}. {column_hint}"
            )
        tables.append(table)
    try:
        combined = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        schemas = "; ".join(f"{path}: {table.schema.names}" for path, table in zip(paths, tables))
        raise ValueError(f"{files_key}: the parquet files have incompatible columns ({exc}). {schemas}") from exc
    return datasets.Dataset(combined)


def find_split_file(folder: str, split: str) -> str:
    """The parquet file for `split` under `folder`: `<split>.parquet`, or the Hugging Face hub layout
    `<config>/<split>-00000-of-00001.parquet` (also `data/...`); several shards are not supported."""
    root = os.path.expanduser(folder)
    if not os.path.isdir(root):
        raise FileNotFoundError(f"dataset folder {folder!r} does not exist")
    flat = os.path.join(root, f"{split}.parquet")
    if os.path.isfile(flat):
        return flat
    candidates = sorted(
        glob.glob(os.path.join(root, f"{split}-*.parquet")) + glob.glob(os.path.join(root, "*", f"{split}-*.parquet"))
    )
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise FileNotFoundError(
            f"no {split!r} split in {folder!r}: expected {split}.parquet or <config>/{split}-00000-of-00001.parquet"
        )
    raise ValueError(f"several {split!r} parquet files in {folder!r}: {candidates}; keep one config folder")


def add_save_dir_args(parser, default: str) -> None:
    """The preprocess scripts' output flags, as upstream's: --local_save_dir and its deprecated alias --local_dir."""
    parser.add_argument("--local_save_dir", default=default, help="writes train.parquet and test.parquet")
    parser.add_argument("--local_dir", default=None, help="deprecated alias of --local_save_dir")


def write_splits(args, splits) -> tuple[str, ...]:
    """Write each `(split, rows)` of `splits` (rows: a list of dicts, made lazily if a generator) to
    `<save dir>/<split>.parquet`, the save dir from add_save_dir_args' flags; returns the paths in order."""
    if getattr(args, "local_dir", None):
        print("--local_dir is deprecated; use --local_save_dir")
    save_dir = os.path.expanduser(args.local_dir or args.local_save_dir)
    os.makedirs(save_dir, exist_ok=True)
    paths = []
    for split, rows in splits:
        path = os.path.join(save_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        paths.append(path)
        print(f"wrote {len(rows)} {split} rows to {path}")
    return tuple(paths)
