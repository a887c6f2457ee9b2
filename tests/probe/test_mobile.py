"""Android and iOS backends on captured getprop / cpuinfo / ios_ver outputs; app memory rule."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from hwadvisor.models import Device, DeviceClass
from hwadvisor.probe import android, ios, mobile
from hwadvisor.probe.android import AndroidBackend
from hwadvisor.probe.ios import IosBackend
from hwadvisor.profiles import enrich_devices

ROOT = Path(__file__).parents[1] / "fixtures"
GIB = 2**30
MEMINFO_BYTES = 11718420 * 1024
IOSVersionInfo = namedtuple("IOSVersionInfo", "system release model is_simulator")
AndroidVer = namedtuple("AndroidVer", "release api_level manufacturer model device is_emulator")


def fixture(folder: str, name: str) -> str:
    return (ROOT / folder / name).read_text()


def files(mapping: dict[str, str | None]):
    """A file reader over /proc names ('cpuinfo', 'meminfo') -> text."""
    return lambda path: mapping.get(Path(path).name)


def android_backend(getprop: str | None, cpuinfo: str | None = None, on_android: bool = False,
                    version=None, meminfo: str | None = None, psutil_total: int | None = None):
    calls: list[tuple[list[str], float]] = []

    def run(argv, timeout_s):
        calls.append((argv, timeout_s))
        return getprop if argv == ["getprop"] else None

    backend = AndroidBackend(
        runner=run,
        reader=files({"cpuinfo": cpuinfo, "meminfo": meminfo}),
        is_android=lambda: on_android,
        android_ver=lambda: version,
        memory_total=lambda: psutil_total,
    )
    return backend, calls


# --- Android --------------------------------------------------------------------------------


def test_getprop_sm8650():
    backend, calls = android_backend(fixture("android", "getprop-sm8650.txt"),
                                     meminfo=fixture("android", "meminfo-12g.txt"))
    (soc,) = backend.probe().devices
    assert soc.name == "Qualcomm Snapdragon 8 Gen 3 (SM8650)"
    assert soc.vendor == "qualcomm"
    assert soc.device_class == DeviceClass.MOBILE_SOC.value
    assert soc.unified_memory is True
    assert soc.pci_device_id is None
    assert soc.memory_total_bytes == MEMINFO_BYTES
    assert calls == [(["getprop"], android.GETPROP_TIMEOUT_S)]
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id == "snapdragon-8-gen-3"


def test_getprop_board_platform_only():
    backend, _ = android_backend(fixture("android", "getprop-old-platform-only.txt"),
                                 psutil_total=8 * GIB)
    (soc,) = backend.probe().devices
    assert soc.name == "Qualcomm Snapdragon 8 Gen 2 (SM8550)"
    assert soc.memory_total_bytes == 8 * GIB  # meminfo unreadable: psutil


def test_getprop_unknown_vendor_soc():
    backend, _ = android_backend(fixture("android", "getprop-mediatek.txt"))
    (soc,) = backend.probe().devices
    assert soc.name == "MediaTek MT6989" and soc.vendor == "mediatek"
    assert any("not in the SoC table" in note for note in soc.notes)


def test_cpuinfo_cores_sm8650_without_hardware_line():
    backend, _ = android_backend(None, fixture("android", "cpuinfo-sm8650-no-hardware.txt"),
                                 on_android=True)
    (soc,) = backend.probe().devices
    assert soc.name == "Qualcomm Snapdragon 8 Gen 3 (SM8650)"
    assert not any("uncertain" in note for note in soc.notes)


def test_cpuinfo_oryon_is_8_elite_marked_uncertain():
    backend, _ = android_backend(None, fixture("android", "cpuinfo-sm8750-oryon.txt"),
                                 version=AndroidVer("15", 35, "samsung", "SM-S936B", "pa2q", False))
    (soc,) = backend.probe().devices
    assert soc.name == "Qualcomm Snapdragon 8 Elite (SM8750)"
    assert any("uncertain" in note for note in soc.notes)
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id == "snapdragon-8-elite"


def test_cpuinfo_hardware_line():
    backend, _ = android_backend(None, fixture("android", "cpuinfo-sm8250-hardware-line.txt"),
                                 on_android=True)
    (soc,) = backend.probe().devices
    assert soc.name == "Qualcomm Snapdragon 865 (SM8250)"


def test_linux_arm_server_is_not_a_phone():
    # No getprop and no Android runtime: cpuinfo is not even read.
    backend, _ = android_backend(None, fixture("android", "cpuinfo-sm8750-oryon.txt"))
    result = backend.probe()
    assert result.devices == [] and "not Android" in result.notes[0]


def test_unknown_cores_on_android_give_unknown_soc():
    backend, _ = android_backend(None, fixture("android", "cpuinfo-neoverse-n1-server.txt"),
                                 on_android=True)
    (soc,) = backend.probe().devices
    assert soc.name == "Android SoC (unknown)" and soc.vendor == "unknown"


@pytest.mark.parametrize("garbage", ["", "garbage\n[x]", "[ro.soc.model]: []\n"])
def test_getprop_garbage_is_not_android(garbage):
    backend, _ = android_backend(garbage)
    assert backend.probe().devices == []


def test_android_runner_that_raises_is_contained():
    def broken(argv, timeout_s):
        raise RuntimeError("boom")

    result = AndroidBackend(runner=broken, is_android=lambda: False).probe()
    assert result.devices == [] and "probe failed" in result.notes[0]


def test_cpuinfo_parsing_tolerates_garbage():
    text = "CPU implementer\t: zz\nCPU part\t: 0xd80\nCPU implementer\t: 0x41\nCPU part\t: 0xd82\n"
    assert android.parse_cpuinfo_cores(text) == {(0x41, 0xD82): 1}
    assert android.parse_cpuinfo_cores(None) == {}


def test_meminfo_parsing():
    assert mobile.parse_meminfo_total_bytes(fixture("android", "meminfo-12g.txt")) == MEMINFO_BYTES
    assert mobile.parse_meminfo_total_bytes("garbage") is None


# --- iOS ------------------------------------------------------------------------------------


def ios_ver(name: str) -> IOSVersionInfo:
    return IOSVersionInfo(**json.loads(fixture("ios", name)))


def ios_probe(name: str | None, system: str = "iOS", ram: int | None = 8 * GIB):
    version = ios_ver(name) if name else None
    return IosBackend(platform_name=lambda: system, ios_ver=lambda: version,
                      memory_total=lambda: ram).probe()


def test_iphone_15_pro_is_a17_pro():
    (soc,) = ios_probe("ios-ver-iphone16-1.json").devices
    assert soc.name == "Apple A17 Pro (iPhone16,1)"
    assert soc.vendor == "apple" and soc.device_class == DeviceClass.MOBILE_SOC.value
    assert soc.unified_memory and soc.memory_total_bytes == 8 * GIB
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id == "a17-pro"


def test_iphone_16_is_a18_not_a18_pro():
    (soc,) = ios_probe("ios-ver-iphone17-3.json").devices
    assert soc.name == "Apple A18 (iPhone17,3)"
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id != "a18-pro"


def test_simulator_and_unknown_identifier():
    (sim,) = ios_probe("ios-ver-simulator.json").devices
    assert any("simulator" in note for note in sim.notes)
    (new,) = ios_probe("ios-ver-unknown-model.json").devices
    assert new.name == "Apple iPhone19,1"


def test_iphone_17_pro_max_is_a19_pro_with_npu_and_app_limit():
    (soc,) = ios_probe("ios-ver-iphone18-2.json", ram=12 * GIB).devices
    assert soc.name == "Apple A19 Pro (iPhone18,2)"
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id == "a19-pro"
    assert enriched.npu is not None and enriched.npu.name.startswith("Apple Neural Engine")
    assert enriched.app_memory_limit_bytes == 6 * GIB  # probe/mobile.py's rule, on the device


def test_old_python_without_ios_ver():
    (soc,) = ios_probe(None).devices
    assert soc.name == "Apple iPhone (unknown model)"


def test_not_ios():
    assert ios_probe("ios-ver-iphone16-1.json", system="Darwin").devices == []


def test_chip_table():
    assert ios.chip_name("iPhone16,2") == "Apple A17 Pro"
    assert ios.chip_name("iPhone17,1") == "Apple A18 Pro"
    assert ios.chip_name("iPhone15,4") == "Apple A16 Bionic"
    assert ios.chip_name("iPad14,1") is None
    assert ios.chip_name("iPhone18,3") == "Apple A19"
    assert ios.chip_name("iPhone18,4") == "Apple A19 Pro"


# --- per-app memory rule ----------------------------------------------------------------------


def phone(vendor: str, ram: int | None, profile_id: str | None = None,
          device_class: DeviceClass = DeviceClass.MOBILE_SOC) -> Device:
    return Device(index=0, vendor=vendor, device_class=device_class, name="x",
                  memory_total_bytes=ram, source="probe", profile_id=profile_id)


def test_app_memory_limit_rule():
    assert mobile.app_memory_limit_bytes(phone("apple", 8 * GIB)) == int(
        8 * GIB * mobile.APP_MEMORY_RULES["ios"].fraction)
    assert mobile.app_memory_limit_bytes(phone("qualcomm", 12 * GIB)) == int(
        12 * GIB * mobile.APP_MEMORY_RULES["android"].fraction)
    assert mobile.app_memory_limit_bytes(phone("qualcomm", None)) is None
    assert mobile.app_memory_limit_bytes(
        phone("amd", 24 * GIB, device_class=DeviceClass.CONSUMER_GPU)) is None


def test_app_memory_limit_prefers_profile_fraction():
    assert mobile.app_memory_limit_bytes(phone("apple", 8 * GIB, "a17-pro"),
                                         profile_fraction=0.25) == 2 * GIB


def test_app_memory_limit_is_computed_in_one_place():
    # profiles/devices.py and probe/target.py get the limit from app_memory_limit_for
    # (probe/mobile.py re-exports it).
    from hwadvisor import profiles
    from hwadvisor.probe import target

    profile = profiles.get("snapdragon-8-elite")
    expected = mobile.app_memory_limit_for(profile.memory_total_bytes, "android", 0.5)
    assert profiles.mobile_app_memory_limit_bytes(profile) == expected
    assert profiles.device_from_profile("snapdragon-8-elite").app_memory_limit_bytes == expected
    report = target.resolve_target("snapdragon-8-elite")
    assert report.host.mobile_app_memory_limit_bytes == expected
    assert report.devices[0].app_memory_limit_bytes == expected
    assert mobile.app_memory_limit_for(None, "ios") is None
    assert mobile.app_memory_limit_for(8 * GIB, "ios") == int(
        8 * GIB * mobile.APP_MEMORY_RULES["ios"].fraction)


def test_android_phone_gets_sustained_fraction_from_its_profile():
    backend, _ = android_backend(fixture("android", "getprop-old-platform-only.txt"),
                                 psutil_total=8 * GIB)
    (soc,) = backend.probe().devices
    (enriched,), _ = enrich_devices([soc])
    assert enriched.profile_id == "snapdragon-8-gen-2"
    assert enriched.sustained_fraction == pytest.approx(0.72)
    assert enriched.app_memory_limit_bytes == 4 * GIB


def test_rules_cite_sources():
    for rule in mobile.APP_MEMORY_RULES.values():
        assert 0 < rule.fraction <= 1
        assert rule.sources and all(url.startswith("https://") for url in rule.sources)
