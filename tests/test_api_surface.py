"""Every upstream name listed in tests/fixtures/upstream_api_surface.txt imports from its upstream path."""

import importlib
from pathlib import Path

import pytest

SURFACE = Path(__file__).parent / "fixtures" / "upstream_api_surface.txt"


def entries() -> list[str]:
    lines = [line.strip() for line in SURFACE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_list_is_well_formed_and_has_no_duplicates():
    listed = entries()
    assert all(line.count(":") == 1 for line in listed), [line for line in listed if line.count(":") != 1]
    assert len(listed) == len(set(listed))


@pytest.mark.parametrize("entry", entries())
def test_upstream_name_is_importable(entry):
    module_name, dotted = entry.split(":")
    obj = importlib.import_module(module_name)
    for part in dotted.split("."):
        assert hasattr(obj, part), f"{module_name} has no {dotted}"
        obj = getattr(obj, part)
