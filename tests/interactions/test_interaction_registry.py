"""initialize_interactions_from_config: upstream's interaction YAML, names, and errors naming file and entry."""

from pathlib import Path

import pytest

from verl.interactions.base import BaseInteraction
from verl.interactions.gsm8k_interaction import Gsm8kInteraction
from verl.interactions.utils.interaction_registry import initialize_interactions_from_config

CONFIG = (Path(__file__).resolve().parents[2] / "examples" / "sglang_multiturn" / "config" / "interaction_config"
          / "gsm8k_interaction_config.yaml")


class JudgeInteraction(BaseInteraction):
    pass


def write(tmp_path, text):
    path = tmp_path / "interactions.yaml"
    path.write_text(text)
    return str(path)


def test_bundled_config():
    interactions = initialize_interactions_from_config(str(CONFIG))
    assert list(interactions) == ["gsm8k"]
    assert isinstance(interactions["gsm8k"], Gsm8kInteraction) and interactions["gsm8k"].name == "gsm8k"


def test_names_given_and_derived_and_config_passed(tmp_path):
    path = write(tmp_path, f"""
interaction:
  - class_name: {__name__}.JudgeInteraction
    config: {{strictness: 2}}
  - name: math
    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
""")
    interactions = initialize_interactions_from_config(path)
    assert list(interactions) == ["judge", "math"]  # JudgeInteraction -> "judge"
    assert interactions["judge"].config == {"strictness": 2, "name": "judge"}
    assert interactions["math"].name == "math" and isinstance(interactions["math"], Gsm8kInteraction)


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ("interaction:\n  - name: a\n    config: {}\n", ValueError, r"interaction\[0\]: class_name is missing"),
        ("interaction:\n  - class_name: nowhere.Thing\n", ModuleNotFoundError, r"interaction\[0\].*cannot import module"),
        ("interaction:\n  - class_name: collections.OrderedDict\n", TypeError,
         r"interaction\[0\].*not a subclass of .*BaseInteraction"),
        ("interaction:\n  - name: g\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
         "  - name: g\n    class_name: verl.interactions.base.BaseInteraction\n",
         ValueError, r"interaction\[1\].*name 'g' is used twice"),
        ("interactions: []\n", ValueError, "top-level `interaction:` list"),
    ],
)
def test_errors_name_the_file_and_entry(tmp_path, body, error, message):
    with pytest.raises(error, match=message) as info:
        initialize_interactions_from_config(write(tmp_path, body))
    assert "interactions.yaml" in str(info.value)
