"""Rollout skip (upstream's ``verl.utils.rollout_skip``): dump the generated batches of the first steps and replay
them later, so that work on the training side can be repeated without paying for generation again.

``RolloutSkip(config)`` reads ``actor_rollout_ref.rollout.skip`` (``enable``, ``dump_dir``, ``dump_step``,
``post_dump_action``, ``compress``), ``actor_rollout_ref.rollout.n``, ``data.gen_batch_size`` (else
``data.train_batch_size``), ``data.max_prompt_length`` / ``max_response_length`` and ``trainer.project_name`` /
``experiment_name`` from whatever config it is given (a DictConfig, a dict or typed sections); a config without a
``skip`` section leaves it disabled. ``wrap_generate_sequences(wg)`` patches ``wg.generate_sequences``; the trainer
calls ``record(new_batch)`` before each generation so that a replayed step gets the prompts (and ground truths)
that belong to the replayed responses. ``RayPPOTrainer`` does this when ``skip.enable`` (``skip_for_training``): only
its training generations go through the skip (validation and the ReMax baseline always generate), and the step
counter counts the generation rounds of this process, from 1 (a resumed run replays from the first dump, as upstream).

Steps 1..dump_step load ``<dump_dir>/<experiment>_<project>/GBS<gbs>_N<n>_in<p>_out<r>/genstep_<step>.pt`` when
it exists and generate and dump it otherwise; later steps follow ``post_dump_action``: ``repeat`` cycles through
the dumped steps, ``repeat_last`` replays the last one, ``rollout`` generates, ``rollout_with_dump`` generates and
dumps. Upstream's current spelling, ``max_dump_step`` and ``action`` (``cache`` = ``rollout``, its default;
``repeat``; ``repeat_last``), is read too (``verl.workers.config.rollout.settle_skip_spellings``).

Unlike upstream, a dump file is not a pickle: it holds the batches in DataProto's safe format
(``verl.protocol.safe_io``), optionally zlib-compressed, and is read with ``torch.load(weights_only=True)``, so a
dump file cannot run code when loaded. A dump that cannot be written raises (upstream prints and goes on).
"""

from __future__ import annotations

import io
import logging
import time
import zlib
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from verl.checkpoint.atomic import atomic_torch_save
from verl.protocol import DataProto
from verl.protocol.safe_io import from_payload, to_payload
from verl.workers.config.rollout import settle_skip_spellings

__all__ = ["DataProto", "PostDumpAction", "RolloutSkip", "TrainingRollout", "dataproto_compress",
           "dataproto_decompress", "read_dumped_data", "skip_for_training", "wrap_generate_sequences"]

logger = logging.getLogger(__name__)

DUMP_FORMAT = "verl.rollout_skip/1"
DEFAULT_DUMP_DIR = "/tmp/verl/rollout_dump"
_BATCH_KEYS = ("new_batch", "gen_batch")


class PostDumpAction(Enum):
    REPEAT = "repeat"  # cycle through the dumped steps
    REPEAT_LAST = "repeat_last"  # replay the last dumped step
    ROLLOUT = "rollout"  # generate as usual
    ROLLOUT_WITH_DUMP = "rollout_with_dump"  # generate and dump every step


def _get(node: Any, key: str, default: Any = None) -> Any:
    """`node.key` for a dict, a DictConfig or an object with attributes; `default` when absent or None."""
    if node is None:
        return default
    value = node.get(key, default) if hasattr(node, "get") else getattr(node, key, default)
    return default if value is None else value


def _encode(batch: DataProto) -> dict:
    return to_payload(batch.batch, batch.non_tensor_batch, batch.meta_info)


def _decode(payload: dict) -> DataProto:
    tensors, non_tensors, meta = from_payload(payload)
    return DataProto(batch=tensors, non_tensor_batch=non_tensors, meta_info=meta)


def dataproto_compress(dict_data: dict) -> dict[str, Any]:
    """Replace each DataProto named in ``dict_data["compressed"]`` by zlib-compressed bytes of its safe encoding
    (in place); returns sizes (bytes), times (s) and the ratio compressed / raw."""
    dict_data["compresser_name"] = "zlib"
    sizes = [0, 0]
    times = [0.0, 0.0]
    for key in dict_data.get("compressed", []):
        start = time.perf_counter()
        buffer = io.BytesIO()
        torch.save(_encode(dict_data[key]), buffer)
        raw = buffer.getvalue()
        times[0] += time.perf_counter() - start
        start = time.perf_counter()
        dict_data[key] = zlib.compress(raw)
        times[1] += time.perf_counter() - start
        sizes[0] += len(raw)
        sizes[1] += len(dict_data[key])
    return {"size_data": sizes[0], "size_compressed_data": sizes[1], "time_pickle": times[0],
            "time_compress": times[1], "ratio": sizes[1] / sizes[0] if sizes[0] else None}


def dataproto_decompress(dict_data: dict) -> dict:
    """Undo ``dataproto_compress`` in place (and decode batches stored uncompressed); returns `dict_data`."""
    name = dict_data.get("compresser_name", "zlib")
    if name != "zlib":
        raise ValueError(f"rollout dump compressed with {name!r}; this version reads zlib only")
    compressed = set(dict_data.get("compressed", []))
    for key in _BATCH_KEYS:
        value = dict_data.get(key)
        if key in compressed:
            value = torch.load(io.BytesIO(zlib.decompress(value)), weights_only=True)
        if isinstance(value, dict):
            dict_data[key] = _decode(value)
    dict_data["compressed"] = []
    return dict_data


def read_dumped_data(path_dump: str | Path) -> dict[str, Any]:
    """A dump file's contents with ``new_batch`` and ``gen_batch`` as DataProtos."""
    path = Path(path_dump)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no rollout dump there")
    data = torch.load(path, weights_only=True)
    if not isinstance(data, dict) or data.get("format") != DUMP_FORMAT:
        raise ValueError(f"{path} is not a rollout dump of this version (format {DUMP_FORMAT!r})")
    return dataproto_decompress(data)


class RolloutSkip:
    """Dump the generations of the first ``dump_step`` steps and replay them (see the module docstring)."""

    print_mark = "[RolloutSkip()] "

    def __init__(self, config: Any, rollout_wg: Any = None) -> None:
        """``rollout_wg``: upstream's current signature names the group here and wraps it with
        ``wrap_generate_sequences()``; its earlier one passes it to ``wrap_generate_sequences(rollout_wg)``."""
        rollout = _get(_get(config, "actor_rollout_ref"), "rollout")
        self.rollout_config = rollout
        self.skip_config = _get(rollout, "skip")
        self.is_enable = bool(_get(self.skip_config, "enable", False))
        self._rollout_wg = None
        self._given_wg = rollout_wg
        if not self.is_enable:
            return
        trainer, data = _get(config, "trainer"), _get(config, "data")
        self.exp_name = _get(trainer, "experiment_name", "")
        self.project_name = _get(trainer, "project_name", "")
        self.n = int(_get(rollout, "n", 0))
        self.gbs = int(_get(data, "gen_batch_size", _get(data, "train_batch_size", 0)))
        self.prompt_length = _get(data, "max_prompt_length", 0)
        self.response_length = _get(data, "max_response_length", 0)
        self.do_compress = bool(_get(self.skip_config, "compress", True))
        action = _get(self.skip_config, "post_dump_action")
        steps, _, action = settle_skip_spellings(int(_get(self.skip_config, "dump_step", 1)),
                                                 int(_get(self.skip_config, "max_dump_step", 1)),
                                                 _get(self.skip_config, "action", "cache"),
                                                 action.value if isinstance(action, PostDumpAction) else action)
        self.dump_step = max(0, steps)
        self.post_dump_action = PostDumpAction(action)
        if self.dump_step == 0 and self.post_dump_action in (PostDumpAction.REPEAT, PostDumpAction.REPEAT_LAST):
            raise ValueError("actor_rollout_ref.rollout.skip.dump_step=0 dumps nothing, so post_dump_action="
                             f"{self.post_dump_action.value!r} has nothing to replay; use 'rollout' or "
                             "'rollout_with_dump', or dump_step >= 1")
        self.curr_step = 0
        self.list_dumped_steps: list[int] = []
        self._new_batch: DataProto | None = None
        self._flag_record = False
        root = Path(_get(self.skip_config, "dump_dir", DEFAULT_DUMP_DIR))
        self.specify_dumped_dir = root / f"{self.exp_name}_{self.project_name}" / (
            f"GBS{self.gbs}_N{self.n}_in{self.prompt_length}_out{self.response_length}")
        self.specify_dumped_dir.mkdir(parents=True, exist_ok=True)
        print(f"{self.print_mark}rollout dumps in {self.specify_dumped_dir.absolute()}", flush=True)

    @property
    def is_activate(self) -> bool:
        return self.is_enable and self._rollout_wg is not None

    @property
    def is_dump_step(self) -> bool:
        return self.is_activate and self.curr_step <= self.dump_step

    @property
    def num_dumped_step(self) -> int:
        return len(self.list_dumped_steps)

    def get_path_dump(self, step: int | None = None) -> Path:
        step = self.curr_step if step is None else step
        return self.specify_dumped_dir.joinpath(f"genstep_{step:06d}.pt").absolute()

    def record(self, new_batch: DataProto, *args: Any, **kwargs: Any) -> None:
        """The prompts of the coming generation (once per generation); ignored until the worker group is wrapped."""
        if self._rollout_wg is None:
            return
        if self._flag_record:
            logger.warning("RolloutSkip.record called twice for one generation; the first batch is kept")
            return
        self._flag_record, self._new_batch = True, new_batch

    @property
    def is_active(self) -> bool:  # upstream's current name of is_activate
        return self.is_activate

    def wrap_generate_sequences(self, rollout_wg: Any = None) -> None:
        """Patch ``rollout_wg.generate_sequences`` (default: the group given to the constructor); does nothing when
        disabled."""
        if not self.is_enable:
            return
        rollout_wg = self._given_wg if rollout_wg is None else rollout_wg
        if rollout_wg is None:
            raise ValueError("RolloutSkip.wrap_generate_sequences: no rollout worker group (pass it here or to "
                             "RolloutSkip(config, rollout_wg))")
        self._rollout_wg = rollout_wg
        rollout_wg.generate_sequences = wrap_generate_sequences(self, rollout_wg)
        print(f"{self.print_mark}Successfully patched `generate_sequences()` of the rollout worker group.",
              flush=True)

    def try_load(self, step: int | None = None) -> tuple[DataProto | None, DataProto | None]:
        """(new_batch, gen_batch) dumped at `step` (default: this step), or (None, None) when there is no dump."""
        step = self.curr_step if step is None else step
        path = self.get_path_dump(step)
        if not path.exists():
            return None, None
        data = read_dumped_data(path)
        if step not in self.list_dumped_steps:
            self.list_dumped_steps.append(step)
        print(f"{self.print_mark}loaded the generations of step {step} from {path}", flush=True)
        return data["new_batch"], data["gen_batch"]

    def _take_record(self, what: str) -> DataProto:
        if not self._flag_record or self._new_batch is None:
            raise AssertionError(f"{self.print_mark}{what} needs the prompts of this step: call "
                                 "RolloutSkip.record(new_batch) before every generate_sequences call")
        self._flag_record = False
        return self._new_batch

    def dump(self, outputs: DataProto) -> None:
        """Write the recorded prompts and `outputs` to this step's dump file."""
        data: dict[str, Any] = {"format": DUMP_FORMAT, "new_batch": self._take_record("dump"), "gen_batch": outputs,
                                "compressed": list(_BATCH_KEYS) if self.do_compress else []}
        info = dataproto_compress(data) if self.do_compress else None
        for key in _BATCH_KEYS:
            if isinstance(data[key], DataProto):
                data[key] = _encode(data[key])
        atomic_torch_save(data, str(self.get_path_dump()))
        if self.curr_step not in self.list_dumped_steps:
            self.list_dumped_steps.append(self.curr_step)
        size = f" ({info['size_data'] / 2**20:.2f} MB -> {info['size_compressed_data'] / 2**20:.2f} MB)" if info else ""
        print(f"{self.print_mark}dumped step {self.curr_step} to {self.get_path_dump()}{size}", flush=True)

    def replace_curr_new_batch(self, dumped_new_batch: DataProto) -> None:
        """Give the recorded batch the dumped prompts, so replayed responses are scored against their own prompts."""
        target = self._take_record("replaying a dump")
        target.batch = dumped_new_batch.batch
        target.non_tensor_batch = dumped_new_batch.non_tensor_batch
        target.meta_info = dumped_new_batch.meta_info


def _load_or_generate(skip: RolloutSkip, generate, batch: Any, kwargs: dict, step: int | None) -> DataProto:
    dumped_new_batch, outputs = skip.try_load(step)
    if outputs is None:
        outputs = generate(batch, **kwargs)
        skip.dump(outputs)
    else:
        skip.replace_curr_new_batch(dumped_new_batch)
    return outputs


def wrap_generate_sequences(rolloutskip: RolloutSkip, rollout_wg: Any):
    """The replacement for ``rollout_wg.generate_sequences`` that loads, dumps or generates per step."""
    generate = rollout_wg.generate_sequences

    def generate_or_replay(batch: Any, **kwargs: Any) -> DataProto:
        skip = rolloutskip
        skip.curr_step += 1
        if skip.is_dump_step:
            return _load_or_generate(skip, generate, batch, kwargs, None)
        action = skip.post_dump_action
        if action in (PostDumpAction.REPEAT, PostDumpAction.REPEAT_LAST):
            if not skip.list_dumped_steps:
                raise RuntimeError(f"{skip.print_mark}post_dump_action={action.value!r} but no step was dumped")
            index = (skip.curr_step - 1) % skip.num_dumped_step if action is PostDumpAction.REPEAT else -1
            return _load_or_generate(skip, generate, batch, kwargs, skip.list_dumped_steps[index])
        outputs = generate(batch, **kwargs)
        if action is PostDumpAction.ROLLOUT_WITH_DUMP:
            skip.dump(outputs)
        else:
            skip._flag_record = False  # this step's record is used up without a dump
        return outputs

    return generate_or_replay


class TrainingRollout:
    """The training generations' own handle on the rollout worker group: what the trainer's RolloutSkip patches, so
    that validation and the ReMax greedy baseline keep generating through the worker group itself."""

    def __init__(self, rollout_wg: Any) -> None:
        self.generate_sequences = rollout_wg.generate_sequences


def skip_for_training(config: Any, rollout_wg: Any) -> tuple[RolloutSkip | None, Any]:
    """(RolloutSkip, what training generates through) when ``actor_rollout_ref.rollout.skip.enable``, else
    (None, rollout_wg). The trainer calls ``skip.record(new_batch)`` before each training generation."""
    skip = RolloutSkip(config)
    if not skip.is_enable:
        return None, rollout_wg
    source = TrainingRollout(rollout_wg)
    skip.wrap_generate_sequences(source)
    return skip, source
