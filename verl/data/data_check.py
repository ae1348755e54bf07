"""Checking RL parquet files in one pass before any worker starts.

A bad row otherwise surfaces late: a prompt longer than data.max_prompt_length under the default
``data.truncation=error`` crashes the run when its batch comes up (hours in, and a resume replays that batch); a
row without ``reward_model.ground_truth`` scores 0 silently; a missing column fails at the first reward, after Ray,
model load and a rollout. `check_split` reads only the columns the run needs (pyarrow), renders every prompt with
the tokenizer's chat template exactly as RLHFDataset does, and returns every problem at once, each naming the
files key, the file and the row indices.

What the reward needs from a row is the caller's judgement (the trainer knows the reward config): `RowNeeds`.
This module imports nothing heavy at import time, so entry points can name `DataCheckError` cheaply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl.data.tool_schemas import length_template_kwargs

_TOKENIZE_BATCH = 1024
_SHOWN_ROWS = 5  # row indices listed per problem; the count covers the rest


class DataCheckError(ValueError):
    """The train or val files cannot be trained on as configured; `problems` holds one line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems))


@dataclass(frozen=True)
class RowNeeds:
    """What the configured run reads from each row besides the prompt.

    reward_columns: columns the reward manager reads (data.reward_fn_key and reward_model), empty when a reward
    model or an agent loop scores every sample. ground_truth: every row needs reward_model.ground_truth (the
    built-in rule scorers compare against it). has_scorer: whether a data_source value has a built-in scorer;
    None when the user's own reward decides."""

    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"
    reward_columns: tuple[str, ...] = ("data_source", "reward_model")
    ground_truth: bool = True
    has_scorer: Callable[[str], bool] | None = None


@dataclass
class SplitReport:
    """One split's outcome: rows after max_samples, how many filter_overlong_prompts drops, and the problems."""

    key: str
    rows: int = 0
    filtered: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def kept(self) -> int:
        return self.rows - self.filtered


def sample_rows(n: int, max_samples: int | None, shuffle: bool, seed: int) -> list[int] | None:
    """The rows data.train_max_samples / data.val_max_samples keep (None: all), as RLHFDataset picks them: a
    seeded draw when data.shuffle, else the first ones."""
    if max_samples is None or max_samples < 0 or max_samples >= n:
        return None
    if shuffle:
        import numpy as np

        return np.random.default_rng(seed).choice(n, size=max_samples, replace=False).tolist()
    return list(range(max_samples))


class _RowNames:
    """Global row index -> 'file.parquet row 12' (rows are numbered within their file, from 0)."""

    def __init__(self, files: Sequence[str], sizes: Sequence[int]) -> None:
        self.files = [os.path.basename(f) for f in files]
        self.starts: list[int] = []
        total = 0
        for size in sizes:
            self.starts.append(total)
            total += size

    def name(self, row: int) -> tuple[str, int]:
        import bisect

        i = bisect.bisect_right(self.starts, row) - 1
        return self.files[i], row - self.starts[i]

    def describe(self, rows: Sequence[int], origin: Callable[[int], int],
                 detail: Callable[[int], str] | None = None) -> str:
        """'train.parquet rows 3 (600 tokens), 9 (700 tokens) and 12 more' for the first few of `rows` (indices
        into the checked table; `origin` maps them to the concatenated files' rows)."""
        by_file: dict[str, list[str]] = {}
        for row in rows[:_SHOWN_ROWS]:
            file, local = self.name(origin(row))
            by_file.setdefault(file, []).append(f"{local}{f' ({detail(row)})' if detail else ''}")
        text = "; ".join(f"{file} row{'s' if len(r) > 1 else ''} {', '.join(r)}" for file, r in by_file.items())
        more = len(rows) - _SHOWN_ROWS
        return text + (f" and {more} more" if more > 0 else "")


def _read_columns(key: str, files: Sequence[str], wanted: Sequence[str], required: dict[str, str],
                  report: SplitReport) -> tuple[Any, list[int]] | None:
    """The wanted columns of every file, concatenated, and each file's row count; None when a file lacks a
    required column (a problem per file) or cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables, sizes = [], []
    for path in files:
        local = os.path.expanduser(str(path))
        if not os.path.exists(local):
            report.problems.append(f"{key}: parquet file {path!r} does not exist ({os.path.abspath(local)})")
            continue
        try:
            names = pq.read_schema(local).names
        except (pa.ArrowInvalid, OSError) as exc:
            report.problems.append(f"{key}: {path!r} is not a readable parquet file ({exc})")
            continue
        missing = [column for column in required if column not in names]
        for column in missing:
            report.problems.append(f"{key}: {path!r} has no column {column!r} ({required[column]}); its columns: "
                                   f"{names}")
        if missing:
            continue
        table = pq.read_table(local, columns=[c for c in wanted if c in names])
        tables.append(table)
        sizes.append(table.num_rows)
    if report.problems:
        return None
    try:
        return pa.concat_tables(tables, promote_options="permissive"), sizes
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        report.problems.append(f"{key}: the parquet files have incompatible columns ({exc})")
        return None


def _missing_ground_truth(column: Any) -> list[int]:
    """Rows whose reward_model value is null, not a mapping, or has a null/absent ground_truth."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_struct(column.type):
        if column.type.get_field_index("ground_truth") < 0:
            return list(range(len(column)))
        missing = pc.or_kleene(pc.is_null(column), pc.is_null(pc.struct_field(column, "ground_truth")))
        return pc.indices_nonzero(pc.fill_null(missing, True)).to_pylist()
    values = column.to_pylist()  # maps or strings: rare, read in python
    return [row for row, value in enumerate(values)
            if not isinstance(value, dict) or value.get("ground_truth") is None]


def _unscored_sources(column: Any, has_scorer: Callable[[str], bool]) -> dict[str, list[int]]:
    """data_source value -> its rows, for the values no built-in scorer takes."""
    import pyarrow.compute as pc

    unknown = {}
    for value in pc.unique(column).to_pylist():
        if not has_scorer(str(value)):
            mask = pc.is_null(column) if value is None else pc.equal(column, value)
            unknown[str(value)] = pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()
    return unknown


def prompt_lengths(prompts: Sequence[Any], tokenizer: Any, prompt_key: str,
                   template_kwargs: dict[str, Any] | None = None) -> tuple[list[int], list[int]]:
    """(token count of each prompt rendered as RLHFDataset renders it, -1 for a malformed one; malformed rows).
    ``template_kwargs``: data.apply_chat_template_kwargs."""
    from verl.data.prompt_text import as_messages, chat_text

    lengths = [-1] * len(prompts)
    malformed: list[int] = []
    for start in range(0, len(prompts), _TOKENIZE_BATCH):
        rows, texts = [], []
        for row in range(start, min(start + _TOKENIZE_BATCH, len(prompts))):
            try:
                messages = as_messages(prompts[row], row, prompt_key)
            except ValueError:
                malformed.append(row)
                continue
            rows.append(row)
            texts.append(chat_text(tokenizer, messages, template_kwargs))
        if texts:
            for row, ids in zip(rows, tokenizer(texts, add_special_tokens=False)["input_ids"]):
                lengths[row] = len(ids)
    return lengths, malformed


def _media_problems(key: str, data: Any, processor: Any, columns: list[str]) -> str | None:
    """Why the split's image / video columns cannot be read with ``processor`` (None: they can)."""
    from verl.data.rl_vision import check_media_columns

    try:
        check_media_columns(columns, [key], data, processor)
    except NotImplementedError as err:
        return str(err).replace(f"{[key]}: ", f"{key}: ", 1)
    return None


def _vision_lengths(key: str, table: Any, data: Any, processor: Any, prompt_key: str, report: SplitReport,
                    rows_text: Callable[..., str]) -> list[int] | None:
    """Prompt lengths with image and video tokens counted (the processor on every row, as RLHFDataset renders
    it); rows with missing or unreadable images or videos, or a placeholder count that differs from them, become
    problems. None when the split has no image or video column."""
    columns = table.column_names
    media = [c for c in (data.image_key, data.video_key) if c and c in columns]
    if not media:
        return None
    problem = _media_problems(key, data, processor, columns)
    if problem:
        report.problems.append(problem)
        return None
    from verl.data.prompt_text import as_messages
    from verl.data.rl_vision import vision_prompt_length
    from verl.data.video import VideoError
    from verl.data.vision import ImageError

    prompts = table.column(prompt_key).to_pylist()
    values = {c: table.column(c).to_pylist() for c in media}
    video_key = data.video_key if data.video_key in columns else None
    lengths = [-1] * len(prompts)
    bad: dict[str, list[int]] = {"image": [], "video": [], "image placeholders": [], "video placeholders": []}
    reasons: dict[int, str] = {}
    for row, prompt in enumerate(prompts):
        try:
            lengths[row] = vision_prompt_length(processor, as_messages(prompt, row, prompt_key),
                                                {c: values[c][row] for c in media}, data.image_key, row,
                                                length_template_kwargs(data), video_key,
                                                getattr(data, "image_patch_size", None))
        except VideoError as err:
            bad["video"].append(row)
            reasons[row] = str(err).split(": ", 1)[-1]
        except ImageError as err:
            bad["image"].append(row)
            reasons[row] = str(err).split(": ", 1)[-1]
        except ValueError as err:
            text = str(err)
            kind = "video placeholders" if "<video>" in text else "image placeholders" if "placeholders" in text else \
                "image"
            bad[kind].append(row)
            reasons[row] = text.split(": ", 1)[-1]
    for kind, column, name in (("image", data.image_key, "data.image_key"), ("video", data.video_key,
                                                                             "data.video_key")):
        if bad[kind]:
            report.problems.append(f"{key}: {len(bad[kind])} rows have a missing or unreadable {kind} in column "
                                   f"{column!r} ({name}): {rows_text(bad[kind], reasons.get)}.")
        if bad[f"{kind} placeholders"]:
            report.problems.append(f"{key}: {len(bad[f'{kind} placeholders'])} rows have a different number of "
                                   f"<{kind}> placeholders than {kind}s in column {column!r}: "
                                   f"{rows_text(bad[f'{kind} placeholders'], reasons.get)}.")
    return lengths


def check_split(key: str, files: Sequence[str], data: Any, tokenizer: Any, needs: RowNeeds, max_samples: int = -1,
                min_rows: int = 1, processor: Any = None) -> SplitReport:
    """Check one split's files (key: 'data.train_files' or 'data.val_files'); `data` is the typed data section.

    Problems are collected, not raised: the caller reports both splits at once. `min_rows`: rows the split must
    keep after filtering (the train split: one batch). `processor`: the model's multi-modal processor (None for a
    text model); image rows are rendered with it and their image tokens counted."""
    report = SplitReport(key)
    required = {needs.prompt_key: "data.prompt_key: the chat messages"}
    if needs.reward_columns:
        required[needs.reward_fn_key] = "data.reward_fn_key: picks the reward function"
        required["reward_model"] = "{'ground_truth': ...}, read by the reward manager"
    media = [c for c in (getattr(data, "image_key", None), getattr(data, "video_key", None)) if c]
    audio = getattr(data, "audio_key", None)
    read = _read_columns(key, files, list(required) + media + ([audio] if audio else []), required, report)
    if read is None:
        return report
    table, sizes = read
    if audio and audio in table.column_names:
        with_audio = [row for row, value in enumerate(table.column(audio).to_pylist()) if value]
        if with_audio:
            report.problems.append(
                f"{key}: {len(with_audio)} rows hold audio in column {audio!r} (data.audio_key); audio inputs are not "
                "built here (upstream hands them to an omni model's processor). Drop the column, or point "
                "data.audio_key at a column the files do not have.")
    names = _RowNames(files, sizes)
    selected = sample_rows(table.num_rows, max_samples, data.shuffle, data.seed)
    if selected is not None:
        table = table.take(selected)
    origin = (lambda row: selected[row]) if selected is not None else (lambda row: row)
    report.rows = table.num_rows
    if table.num_rows == 0:
        counts = ", ".join(f"{os.path.basename(f)}: {n}" for f, n in zip(files, sizes))
        tail = ("set data.val_files=null to train without validation (an empty set would turn validation off "
                "silently)" if key == "data.val_files" else "point it at the training data")
        report.problems.append(f"{key}: no rows to {'validate' if key == 'data.val_files' else 'train'} on "
                               f"({counts}); {tail}.")
        return report

    def rows_text(rows: Sequence[int], detail: Callable[[int], str] | None = None) -> str:
        return names.describe(rows, origin, detail)

    if needs.ground_truth:
        missing = _missing_ground_truth(table.column("reward_model"))
        if missing:
            report.problems.append(
                f"{key}: {len(missing)} of {table.num_rows} rows have no reward_model.ground_truth, which the "
                f"built-in rule reward compares every response with (they would all score 0): {rows_text(missing)}. "
                "Fill it in, or score with custom_reward_function.path / a reward model.")
    if needs.has_scorer is not None:
        for source, rows in _unscored_sources(table.column(needs.reward_fn_key), needs.has_scorer).items():
            report.problems.append(
                f"{key}: {len(rows)} rows have {needs.reward_fn_key}={source!r}, which no built-in scorer takes: "
                f"{rows_text(rows)}. Set custom_reward_function.path to your compute_score, or register the data "
                "source (verl.rewards.register_data_source).")

    vision = _vision_lengths(key, table, data, processor, needs.prompt_key, report, rows_text) if media else None
    if vision is None:
        # with data.filter_overlong_prompts the tools' schemas count, as in the dataset's filter (data.tool_config_path)
        lengths, malformed = prompt_lengths(table.column(needs.prompt_key).to_pylist(), tokenizer, needs.prompt_key,
                                            length_template_kwargs(data))
    else:
        lengths, malformed = vision, []
    if malformed:
        report.problems.append(
            f"{key}: {len(malformed)} rows of column {needs.prompt_key!r} (data.prompt_key) hold neither chat "
            f"messages [{{'role': ..., 'content': ...}}, ...] nor a string: {rows_text(malformed)}.")
    limit = data.max_prompt_length
    overlong = [row for row, length in enumerate(lengths) if length > limit]
    if overlong and data.filter_overlong_prompts:
        report.filtered = len(overlong)
    elif overlong and (data.truncation == "error" or vision is not None):
        media = "image / video" if getattr(data, "video_key", None) in table.column_names else "image"
        counted = f" and {media} tokens counted" if vision is not None else ""
        tail = ("an image prompt cannot be truncated." if vision is not None else
                "or set data.truncation to left/right/middle.")
        report.problems.append(
            f"{key}: {len(overlong)} of {table.num_rows} prompts are longer than data.max_prompt_length={limit} "
            f"tokens with the chat template applied{counted}: {rows_text(overlong, lambda r: f'{lengths[r]} tokens')}."
            f" Raise data.max_prompt_length, set data.filter_overlong_prompts=true to drop such rows, {tail}")
    if not report.problems and report.kept < min_rows:
        need = "one batch (data.gen_batch_size, null: data.train_batch_size)" if min_rows > 1 else "one row"
        if report.filtered:
            why = (f"all {report.rows} prompts are" if report.kept == 0 else
                   f"{report.filtered} of {report.rows} prompts are")
            report.problems.append(
                f"{key}: {report.kept} rows left after data.filter_overlong_prompts ({why} longer than "
                f"data.max_prompt_length={limit} tokens), fewer than {need}={min_rows}; raise "
                "data.max_prompt_length.")
        else:
            report.problems.append(f"{key}: {report.rows} rows, fewer than {need}={min_rows}, so no step would "
                                   "run; add rows or lower the batch size.")
    return report


__all__ = ["DataCheckError", "RowNeeds", "SplitReport", "check_split", "prompt_lengths", "sample_rows"]
