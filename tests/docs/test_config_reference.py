"""docs/config.md's "Every key" section: generated from the typed config and the yaml, one row per key, with its
type, the yaml's default, the allowed values and whether it is honoured, refused or free-form."""

from __future__ import annotations

from verl.trainer.config.docs import ALL_BEGIN, ALL_END, DOC, all_keys_table
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.utils.config_schema import schema_keys


def _rows() -> dict[str, list[str]]:
    section = DOC.read_text().split(ALL_BEGIN)[1].split(ALL_END)[0]
    assert section.strip() == all_keys_table(), "run: python -m verl.trainer.config.docs --write"
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_key_of_the_schema_has_a_row_or_sits_under_one():
    rows = _rows()
    keys, _ = schema_keys(PPOTrainerConfig)
    missing = [k for k in keys
               if k not in rows
               and not any(k.startswith(r + ".") for r in rows)  # under a refused or free-form section
               and not any(r.startswith(k + ".") for r in rows)]  # a section: its leaves have rows
    assert not missing, missing
    assert len(rows) > 300


def test_rows_say_type_default_rules_and_status():
    rows = _rows()
    assert rows["data.train_batch_size"] == ["int", "`8`", ">= 1", "honoured"]
    assert rows["data.tokenizer"][:2] == ["str \\| None", "`null`"]
    assert rows["data.use_shm"][3] == "refused: any value but the default"
    assert rows["actor_rollout_ref.rollout.name"][2:] == ["one of `hf`, `vllm`, `sglang`", "honoured; refused: `sglang`"]
    assert rows["actor_rollout_ref.model.override_config"][3].startswith("free-form")
    # the yaml's own default text: an interpolation is shown as written, not resolved
    assert rows["actor_rollout_ref.actor.use_remove_padding"][1].startswith("`${")


def test_the_other_entry_points_have_every_key_too():
    from verl.trainer.config.docs import OTHER_SCHEMAS, YAML, _all_markers

    text = DOC.read_text()
    for name, schema in OTHER_SCHEMAS:
        begin, end = _all_markers(name)
        section = text.split(begin)[1].split(end)[0]
        assert section.strip() == all_keys_table(schema, YAML.with_name(f"{name}.yaml")), name
        rows = {line.split(" | ")[0].strip("| `") for line in section.splitlines() if line.startswith("| `")}
        keys, _ = schema_keys(schema)
        missing = [k for k in keys if k not in rows and not any(k.startswith(r + ".") for r in rows)
                   and not any(r.startswith(k + ".") for r in rows)]
        assert not missing, (name, missing)
    sft = text.split(_all_markers("sft_trainer")[0])[1].split(_all_markers("sft_trainer")[1])[0]
    assert "| `ulysses_sequence_parallel_size` | int | `1` | >= 1 | honoured |" in sft  # a top-level key
    assert "| `trainer.ray_wait_register_center_timeout` | int \\| None | `300` | >= 1 | honoured |" in sft
