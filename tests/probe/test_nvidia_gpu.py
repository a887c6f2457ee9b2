"""The real probe on a real NVIDIA GPU (skipped without one; the lead runs it on an H200)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hwadvisor.models import DeviceClass
from hwadvisor.probe.nvidia import NvidiaBackend
from hwadvisor.probe.nvml import Nvml


def _nvml_gpu_count() -> int:
    # Asked through our NVML helper, not torch: the probe must not need torch.
    helper = Nvml()
    try:
        return helper.device_count()
    finally:
        helper.shutdown()


GPU_COUNT = _nvml_gpu_count()
requires_cuda = pytest.mark.skipif(GPU_COUNT == 0, reason="needs an NVIDIA GPU with NVML")
requires_two = pytest.mark.skipif(GPU_COUNT < 2, reason="needs two NVIDIA GPUs")

# Datasheet memory bandwidth (GB/s) by name fragment, to sanity-check the NVML-derived figure.
# Sources: NVIDIA H200 datasheet (4.8 TB/s), H100 SXM datasheet (3.35 TB/s), H100 PCIe
# (2.0 TB/s), A100 80GB SXM (2.039 TB/s), L4 (300 GB/s), GeForce RTX 4090 (1008 GB/s).
DATASHEET_BANDWIDTH_GBPS = {
    "H200": 4800.0, "H100 80GB HBM3": 3350.0, "H100 PCIe": 2000.0, "A100-SXM4-80GB": 2039.0,
    "L4": 300.0, "RTX 4090": 1008.0,
}


@pytest.fixture(scope="module")
def result():
    helper = Nvml()
    try:
        yield NvidiaBackend(helper).probe()
    finally:
        helper.shutdown()


@pytest.mark.gpu
@requires_cuda
def test_real_probe_sane(result):
    assert len(result.devices) == GPU_COUNT
    for device in result.devices:
        assert device.vendor == "nvidia" and device.source == "probe"
        assert device.name
        assert device.memory_total_bytes and device.memory_total_bytes > 1e9
        assert device.compute_capability and "." in device.compute_capability
        assert device.device_class in (DeviceClass.DATACENTER_GPU.value,
                                       DeviceClass.CONSUMER_GPU.value)
        assert device.nvidia.driver_version
        assert device.nvidia.cuda_driver_version
        assert device.nvidia.power_limit_w is None or 10 < device.nvidia.power_limit_w < 2000
        if device.memory_bandwidth_gbps is not None:
            assert 50 < device.memory_bandwidth_gbps < 20000
        if device.compute_units is not None:
            assert 1 <= device.compute_units <= 1000


@pytest.mark.gpu
@requires_cuda
def test_real_bandwidth_near_datasheet(result):
    checked = 0
    for device in result.devices:
        for fragment, datasheet in DATASHEET_BANDWIDTH_GBPS.items():
            if fragment in device.name and device.memory_bandwidth_gbps is not None:
                assert abs(device.memory_bandwidth_gbps - datasheet) <= 0.10 * datasheet
                checked += 1
                break
    if checked == 0:
        pytest.skip("no GPU here with a datasheet figure in this test")


@pytest.mark.gpu
@requires_cuda
def test_real_h200_facts(result):
    h200s = [d for d in result.devices if "H200" in d.name]
    if not h200s:
        pytest.skip("not an H200")
    for device in h200s:
        assert device.compute_capability == "9.0"
        assert device.architecture == "Hopper"
        assert device.device_class == DeviceClass.DATACENTER_GPU.value
        assert "fp8" in device.formats and "fp4" not in device.formats
        assert device.memory_total_bytes > 140e9
        if device.compute_units is not None:
            assert device.compute_units == 132


@pytest.mark.gpu
@requires_cuda
def test_real_helper_api():
    helper = Nvml()
    try:
        clocks = helper.current_clocks(0)
        assert clocks["sm_mhz"] is None or clocks["sm_mhz"] > 0
        assert clocks["memory_mhz"] is None or clocks["memory_mhz"] > 0
        procs = helper.gpu_processes(0)
        assert procs is None or all(p.pid > 0 for p in procs)
        reasons = helper.throttle_reasons(0)
        assert reasons is None or isinstance(reasons, list)
    finally:
        helper.shutdown()


@pytest.mark.gpu
@pytest.mark.multigpu
@requires_two
def test_real_peers(result):
    for device in result.devices:
        peers = device.interconnect.peers
        assert {p.peer_index for p in peers} == {d.index for d in result.devices} - {device.index}
        nvlink = device.interconnect.nvlink
        if nvlink is not None and nvlink.links_active:
            assert any(p.nvlinks for p in peers), "NVLink active but no peer link over it"


@pytest.mark.gpu
@requires_cuda
def test_real_cli_json_has_the_gpus():
    done = subprocess.run([sys.executable, "-m", "hwadvisor", "probe", "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len([d for d in report["devices"] if d["vendor"] == "nvidia"]) == GPU_COUNT
    assert "torch" not in done.stderr.lower() or "import" not in done.stderr.lower()
