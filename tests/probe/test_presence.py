"""The cheap vendor signs read before a backend module is loaded (hwadvisor/probe/presence.py)."""

from __future__ import annotations

import types

import pytest

from hwadvisor.probe import presence


@pytest.fixture
def bare_linux(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A Linux host with no AMD driver files, no tools on PATH, no amdsmi, no torch."""
    monkeypatch.setattr(presence.sys, "platform", "linux")
    monkeypatch.setattr(presence.os.path, "exists", lambda path: False)
    monkeypatch.setattr(presence.shutil, "which", lambda name: None)
    monkeypatch.setattr(presence.importlib.util, "find_spec", lambda name: None)
    monkeypatch.delitem(presence.sys.modules, "torch", raising=False)
    monkeypatch.delenv("ANDROID_ROOT", raising=False)
    monkeypatch.delenv("ANDROID_DATA", raising=False)
    monkeypatch.setattr(presence.platform, "system", lambda: "Linux")
    monkeypatch.setattr(presence, "android_ver", lambda: None)
    return monkeypatch


def test_bare_linux_has_no_amd_and_says_what_was_looked_for(bare_linux):
    note = presence.amd_absent()
    assert note is not None and note.startswith("amd: no AMD GPU found")
    for looked_for in ("amdgpu driver", "/dev/kfd", "amd-smi", "rocm-smi", "amdsmi"):
        assert looked_for in note


@pytest.mark.parametrize("path", presence.AMD_DRIVER_PATHS)
def test_an_amd_driver_file_means_the_backend_looks(bare_linux, path):
    bare_linux.setattr(presence.os.path, "exists", lambda p: p == path)
    assert presence.amd_absent() is None


@pytest.mark.parametrize("tool", presence.AMD_TOOLS)
def test_an_amd_tool_on_path_means_the_backend_looks(bare_linux, tool):
    # A container can carry rocm-smi without the driver's files showing; the tool decides then.
    bare_linux.setattr(presence.shutil, "which", lambda name: f"/opt/rocm/bin/{name}"
                       if name == tool else None)
    assert presence.amd_absent() is None


def test_the_amdsmi_library_means_the_backend_looks(bare_linux):
    bare_linux.setattr(presence.importlib.util, "find_spec",
                       lambda name: object() if name == "amdsmi" else None)
    assert presence.amd_absent() is None


def test_a_broken_amdsmi_package_still_counts_as_a_sign(bare_linux):
    def broken(name: str) -> None:
        raise ValueError("amdsmi.__spec__ is None")

    bare_linux.setattr(presence.importlib.util, "find_spec", broken)
    assert presence.amd_absent() is None


def test_a_loaded_rocm_torch_means_the_backend_looks(bare_linux):
    rocm = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.2"))
    bare_linux.setitem(presence.sys.modules, "torch", rocm)
    assert presence.amd_absent() is None
    cuda = types.SimpleNamespace(version=types.SimpleNamespace(hip=None))
    bare_linux.setitem(presence.sys.modules, "torch", cuda)
    assert presence.amd_absent() is not None


@pytest.mark.parametrize("platform_name", ["darwin", "win32"])
def test_amd_is_judged_on_linux_only(bare_linux, platform_name):
    bare_linux.setattr(presence.sys, "platform", platform_name)
    assert presence.amd_absent() is None


def test_bare_linux_is_no_android(bare_linux):
    assert presence.android_absent() == presence.NOT_ANDROID


def test_getprop_on_path_means_the_android_backend_looks(bare_linux):
    bare_linux.setattr(presence.shutil, "which",
                       lambda name: "/system/bin/getprop" if name == "getprop" else None)
    assert presence.android_absent() is None


def test_the_android_runtime_means_the_android_backend_looks(bare_linux):
    bare_linux.setenv("ANDROID_ROOT", "/system")
    bare_linux.setenv("ANDROID_DATA", "/data")
    assert presence.android_absent() is None


def test_python_naming_android_means_the_android_backend_looks(bare_linux):
    bare_linux.setattr(presence, "android_ver", lambda: types.SimpleNamespace(release="14"))
    assert presence.android_absent() is None
    bare_linux.setattr(presence, "android_ver", lambda: None)
    bare_linux.setattr(presence.platform, "system", lambda: "Android")
    assert presence.android_absent() is None


@pytest.mark.parametrize(("system", "apple", "ios"), [
    ("Darwin", None, "ios: not iOS (platform Darwin)"),
    ("iOS", "apple: not macOS (platform iOS)", None),
    ("iPadOS", "apple: not macOS (platform iPadOS)", None),
    ("Linux", "apple: not macOS (platform Linux)", "ios: not iOS (platform Linux)"),
    ("", "apple: not macOS (platform unknown)", "ios: not iOS (platform unknown)"),
])
def test_platform_gates(system, apple, ios):
    assert presence.not_macos(system) == apple
    assert presence.not_ios(system) == ios
