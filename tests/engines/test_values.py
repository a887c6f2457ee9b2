"""The plan values (engines/values.py): the one vocabulary between a plan and an engine's config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hwadvisor.engines import PlanValues, get_engine, render_config
from hwadvisor.engines.schema import PLACEHOLDERS


def test_the_placeholders_are_the_plan_values_fields():
    assert set(PLACEHOLDERS) == set(PlanValues.model_fields)


def test_an_unknown_value_is_refused():
    with pytest.raises(ValidationError):
        PlanValues(model="m", max_seqs=4)  # type: ignore[call-arg]


def test_only_the_values_given_are_filled():
    assert PlanValues(model="m", draft=None).given() == {"model": "m", "draft": None}


@pytest.mark.parametrize(("unit", "words"), [("gpu", "cpu_and_gpu"), ("npu", "cpu_and_ne")])
def test_the_compute_unit_is_said_in_the_configs_words(unit, words):
    rendered = render_config(get_engine("coreml"), [], PlanValues(
        model="meta-llama/Llama-3.1-8B", model_name="Llama-3.1-8B", compute_units=unit))
    assert f'compute_units="{words}"' in rendered.text
