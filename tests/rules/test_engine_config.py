"""The plan's engine values read a device's datasheet facts from the Device, not its profile."""

from __future__ import annotations

from hwadvisor import profiles
from hwadvisor.rules.engine_config import _DEFAULT_SOC, _soc_model


def test_the_soc_model_is_the_part_the_device_carries() -> None:
    assert _soc_model(profiles.device_from_profile("snapdragon-8-elite")) == "SM8750"
    assert _soc_model(profiles.device_from_profile("snapdragon-8-gen-2")) == "SM8550"
    assert _soc_model(profiles.device_from_profile("h200-sxm")) == _DEFAULT_SOC


def test_no_profile_is_looked_up_by_id_for_it() -> None:
    """A device made without its SoC part gets QNN's default, though its profile names one."""
    phone = profiles.device_from_profile("snapdragon-8-elite")
    assert _soc_model(phone.model_copy(update={"soc_part": None})) == _DEFAULT_SOC
