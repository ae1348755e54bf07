"""Dynamic data generation (upstream's ``verl.experimental.dynamic_dataset``): a dataset whose training prompts grow
while training runs.

Select it with ``data.custom_cls.path=pkg://verl.experimental.dynamic_dataset.dynamicgen_dataset`` and
``data.custom_cls.name=DynamicGenDataset``; ``data.datagen.path`` / ``data.datagen.name`` then name your
AbstractDataGenerator subclass (a python file or ``pkg://module``). The generator is built with the
``data.datagen`` section; its ``generate(dataset)`` returns a ``datasets.Dataset`` of new rows (the same columns as
the parquet files), appended once when the dataset is built and again after every training step (the trainer calls
``on_batch_end(batch)``, as upstream's does). New rows are drawn from the next epoch on: the current epoch's order
was fixed when it began. Generated rows are not saved with checkpoints.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from verl.data.rl_dataset import RLHFDataset
from verl.utils.import_utils import load_extern_subclass

logger = logging.getLogger(__name__)

KEY = "data.datagen"


class AbstractDataGenerator(ABC):
    """Upstream's interface: built with the ``data.datagen`` section; ``generate`` returns the rows to add."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def generate(self, dataset: Any) -> Any:
        """New rows (a ``datasets.Dataset``) for ``dataset`` (the DynamicGenDataset; its rows: ``dataset.dataframe``)."""


class MockDataGenerator(AbstractDataGenerator):
    """Upstream's placeholder: adds the dataset's first row again."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)

    def generate(self, dataset: Any) -> Any:
        return dataset.dataframe.select([0])


def load_data_generator_cls(section: Any) -> type:
    """The class named by ``data.datagen.path`` / ``data.datagen.name``, checked to be an AbstractDataGenerator."""
    path, name = getattr(section, "path", None), getattr(section, "name", None)
    if not path or not name:
        raise ValueError(f"{KEY}.path and {KEY}.name must name your AbstractDataGenerator subclass (a python file or "
                         f"pkg://module, and the class in it); got path={path!r}, name={name!r}")
    return load_extern_subclass(KEY, path, name, AbstractDataGenerator, "a subclass of verl.experimental."
                                "dynamic_dataset.dynamicgen_dataset.AbstractDataGenerator")


class DynamicGenDataset(RLHFDataset):
    """RLHFDataset plus the rows ``data.datagen``'s generator adds when built and after every training step."""

    def __init__(self, data_files: str | list[str], tokenizer: Any, config: Any, processor: Any = None,
                 max_samples: int = -1) -> None:
        workers = getattr(config, "dataloader_num_workers", 0)
        if workers:  # each dataloader worker process holds its own copy: the rows added here would not reach it
            raise ValueError(f"data.dataloader_num_workers={workers} with {KEY} (DynamicGenDataset): the rows the "
                             "generator adds after each step live in the trainer's process, so the dataloader must "
                             "read there; set data.dataloader_num_workers=0")
        super().__init__(data_files, tokenizer, config, processor, max_samples=max_samples)
        self.data_generator = load_data_generator_cls(config.datagen)(config.datagen)
        self.on_batch_end(None)

    def append_dataframe(self, new_rows: Any) -> None:
        import datasets

        if not isinstance(new_rows, datasets.Dataset):
            raise TypeError(f"{type(self.data_generator).__name__}.generate returned {type(new_rows).__name__}; it "
                            "must return a datasets.Dataset of new rows")
        if len(new_rows) == 0:
            return
        if self.filter_overlong_prompts:
            new_rows = self._drop_overlong(new_rows)
        try:
            self.dataframe = datasets.concatenate_datasets([self.dataframe, new_rows])
        except ValueError as err:
            raise ValueError(f"{type(self.data_generator).__name__}.generate returned rows whose columns "
                             f"{sorted(new_rows.column_names)} do not match the data's "
                             f"{sorted(self.dataframe.column_names)}: {err}") from err
        logger.info("DynamicGenDataset: %d rows after adding %d", len(self.dataframe), len(new_rows))

    def on_batch_end(self, batch: Any) -> None:
        """Add the generator's rows; the trainer calls it after every training step with the step's batch."""
        self.append_dataframe(self.data_generator.generate(self))
