"""NVIDIA backend: reads each GPU through the NVML helper (hwadvisor.probe.nvml).

Every figure here is read from NVML or derived from NVML readings by a formula stated next to
it; tables below (architectures, formats, device classes) are data, each with its source.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hwadvisor.models import (
    Device,
    DeviceClass,
    Interconnect,
    NvidiaDetails,
    NvLinkInfo,
    PcieLink,
    PeerLink,
)
from hwadvisor.probe.base import BackendResult
from hwadvisor.probe.nvml import CLOCK_MEM, CLOCK_SM, Nvml, c_uint, get_nvml
from hwadvisor.probe.topology import (
    NVML_TOPOLOGY_LEVEL_TO_CODE,
    Runner,
    TopoMatrix,
    cpu_ranges,
    cpus_from_masks,
    nvlink_bandwidth_gbps,
    nvlink_generation,
    nvlinks_in_code,
    pcie_bandwidth_gbps,
    read_topo_matrix,
)

# nvmlDeviceGetArchitecture values (nvml.h NVML_DEVICE_ARCH_*).
NVML_ARCHITECTURES: dict[int, str] = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
    8: "Ada", 9: "Hopper", 10: "Blackwell", 13: "Rubin",
}

# Fallback when nvmlDeviceGetArchitecture is not supported: compute capability -> architecture
# (CUDA C Programming Guide, "Compute Capabilities"). Keys are (major, minor); minor None = any.
CC_ARCHITECTURES: dict[tuple[int, int | None], str] = {
    (6, None): "Pascal", (7, 0): "Volta", (7, 2): "Volta", (7, 5): "Turing", (8, 0): "Ampere",
    (8, 6): "Ampere", (8, 7): "Ampere", (8, 9): "Ada", (9, 0): "Hopper", (10, None): "Blackwell",
    (11, None): "Blackwell", (12, None): "Blackwell",
}

# Low-precision formats run natively, by the first compute capability that has them (tensor
# cores: fp16 Volta 7.0; int8 Turing 7.5; bf16 and tf32 Ampere 8.0; fp8 Ada 8.9 / Hopper 9.0;
# fp4 Blackwell 10.0). Source: NVIDIA architecture whitepapers (Volta, Turing, A100, Ada, H100,
# Blackwell) and the CUDA Programming Guide's compute capability tables.
FORMAT_THRESHOLDS: tuple[tuple[tuple[int, int], str], ...] = (
    ((7, 0), "fp16"),
    ((7, 5), "int8"),
    ((8, 0), "bf16"),
    ((8, 0), "tf32"),
    ((8, 9), "fp8"),
    ((10, 0), "fp4"),
)

# Device class from the product name first (the most specific signal), then from the brand.
# Rule: datacenter-gpu = cards built for servers and scale-out (NVLink/NVSwitch boards, passive
# cooling, HBM or big GDDR): Tesla, A/H/B/GB/GH-series, L4/L40(S), A10/A16/A30/A40, T4, V100.
# consumer-gpu = GeForce/TITAN and the workstation line (Quadro, RTX A6000, RTX 6000 Ada,
# RTX PRO): one box, PCIe, no NVSwitch scale-out, at most 48-96 GB per card -- the advice that
# fits them (fit in one card, offload, consumer power limits) is the consumer-class advice.
# Patterns are searched in the NVML name; the first match wins.
NAME_CLASS_RULES: tuple[tuple[str, DeviceClass], ...] = (
    (r"\bGeForce\b", DeviceClass.CONSUMER_GPU),
    (r"\bTITAN\b", DeviceClass.CONSUMER_GPU),
    (r"\bQuadro\b", DeviceClass.CONSUMER_GPU),
    (r"\bRTX\b", DeviceClass.CONSUMER_GPU),  # RTX A6000, RTX 6000 Ada, RTX PRO 6000, RTX 4090
    (r"\bTesla\b", DeviceClass.DATACENTER_GPU),
    (r"\bDGX\b", DeviceClass.DATACENTER_GPU),
    (r"\bG[HB]\d{3}\b", DeviceClass.DATACENTER_GPU),  # GH200, GB200, GB300
    (r"\b[HB]\d{2,3}[A-Z]?\b", DeviceClass.DATACENTER_GPU),  # H100, H200, H800, H20, B200, B300
    (r"\bA(100|800|40|30|16|10G?|10M|2)\b", DeviceClass.DATACENTER_GPU),
    (r"\bL(4|40S?|20)\b", DeviceClass.DATACENTER_GPU),
    (r"\b(T4|V100|P100|P40|P4)\b", DeviceClass.DATACENTER_GPU),
)

# nvmlDeviceGetBrand values (nvml.h NVML_BRAND_*) when the name says nothing.
BRAND_NAMES: dict[int, str] = {
    0: "unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "TITAN",
    7: "vApps", 8: "vPC", 9: "vCS", 10: "vWS", 11: "Cloud Gaming", 12: "Quadro RTX",
    13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX", 16: "TITAN RTX",
}
BRAND_CLASSES: dict[int, DeviceClass] = {
    1: DeviceClass.CONSUMER_GPU, 2: DeviceClass.DATACENTER_GPU, 5: DeviceClass.CONSUMER_GPU,
    6: DeviceClass.CONSUMER_GPU, 9: DeviceClass.DATACENTER_GPU, 12: DeviceClass.CONSUMER_GPU,
    13: DeviceClass.CONSUMER_GPU, 14: DeviceClass.DATACENTER_GPU, 15: DeviceClass.CONSUMER_GPU,
    16: DeviceClass.CONSUMER_GPU,
}

# NVML_P2P_CAPS_INDEX_READ (nvml.h). pynvml defines it as `0,` (a tuple), and pynvml passes
# its argument untyped to ctypes, which raised ctypes.ArgumentError on the H200x2 host; so we
# pass a ctypes.c_uint ourselves.
P2P_CAPS_INDEX_READ = 0
P2P_STATUS_OK = 0
AFFINITY_SCOPE_NODE = 0
# nvmlDeviceGetTotalEccErrors arguments (nvml.h): NVML_MEMORY_ERROR_TYPE_UNCORRECTED and
# NVML_VOLATILE_ECC (counts since the driver loaded, not over the GPU's life).
ECC_UNCORRECTED = 1
ECC_VOLATILE = 0


def classify_device(name: str | None, brand: int | None) -> DeviceClass:
    """datacenter-gpu or consumer-gpu from the NVML name (first) and brand; consumer if unknown."""
    for pattern, device_class in NAME_CLASS_RULES:
        if name and re.search(pattern, name, flags=re.IGNORECASE):
            return device_class
    if brand is not None and brand in BRAND_CLASSES:
        return BRAND_CLASSES[brand]
    # Unknown card: consumer is the conservative class (no NVLink or HBM assumed).
    return DeviceClass.CONSUMER_GPU


def parse_compute_capability(value: str | None) -> tuple[int, int] | None:
    """'9.0' -> (9, 0); None for anything else."""
    if not value:
        return None
    major, _, minor = value.partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def formats_for(compute_capability: str | None) -> list[str]:
    """Low-precision formats a compute capability runs natively (FORMAT_THRESHOLDS)."""
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return []
    return [fmt for threshold, fmt in FORMAT_THRESHOLDS if cc >= threshold]


def architecture_for(nvml_arch: int | None, compute_capability: str | None) -> str | None:
    """Architecture name from NVML's value, else from the compute capability."""
    if nvml_arch is not None and nvml_arch in NVML_ARCHITECTURES:
        return NVML_ARCHITECTURES[nvml_arch]
    cc = parse_compute_capability(compute_capability)
    if cc is None:
        return None
    return CC_ARCHITECTURES.get(cc) or CC_ARCHITECTURES.get((cc[0], None))


def theoretical_bandwidth_gbps(bus_width_bits: int | None,
                               mem_clock_mhz: int | None) -> float | None:
    """Peak DRAM bandwidth, GB/s: bus_width/8 bytes x 2 transfers per clock x max memory clock.

    The factor 2 is double data rate as NVML reports the memory clock (an H200: 6016 bits,
    3201 MHz -> 4814 GB/s; datasheet 4.8 TB/s).
    """
    if not bus_width_bits or not mem_clock_mhz:
        return None
    return round(bus_width_bits / 8 * 2 * mem_clock_mhz * 1e6 / 1e9, 1)


def cuda_version_text(value: int | None) -> str | None:
    """NVML's CUDA driver version integer as text: 13000 -> '13.0', 12040 -> '12.4'."""
    if value is None or value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _normal_bus_id(bus_id: str | None) -> str | None:
    """'00000000:0A:00.0' and '0000:0a:00.0' both -> '0000:0a:00.0'."""
    if not bus_id:
        return None
    domain, _, rest = bus_id.strip().lower().rpartition(":")
    head, _, bus = domain.rpartition(":")
    try:
        return f"{int(head or '0', 16):04x}:{bus}:{rest}"
    except ValueError:
        return bus_id.strip().lower()


# An ANSI escape sequence (CSI ... final byte, or ESC and one byte), then any other control
# character: a device name is printed to terminals, so none of them may reach it.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b.|[\x00-\x1f\x7f-\x9f]")
# The whole probe's budget for NVML calls; past it every read answers null (with a note), so a
# slow driver (0.3 s a call: 43 s for one probe) costs at most this much.
PROBE_DEADLINE_ENV = "HWADVISOR_PROBE_DEADLINE_S"
PROBE_DEADLINE_S = 10.0

Model = TypeVar("Model", bound=BaseModel)


def clean_name(name: Any) -> str:
    """Return a device name without escape sequences or control characters, trimmed."""
    return _ESCAPES.sub("", str(name)).strip() or "unnamed NVIDIA GPU"


def probe_deadline() -> float:
    """Return the probe's NVML budget in seconds ($HWADVISOR_PROBE_DEADLINE_S, else 10)."""
    try:
        value = float(os.environ.get(PROBE_DEADLINE_ENV, PROBE_DEADLINE_S))
    except ValueError:
        return PROBE_DEADLINE_S
    return value if math.isfinite(value) and value > 0 else PROBE_DEADLINE_S


def checked(value: Any, field: str, bad: dict[str, str], positive: bool = False) -> Any:
    """Return an NVML count, size, clock or limit when it is a finite number >= 0, else None.

    positive: zero is no reading either (a bus width, a power limit). A refused value is
    named in `bad` (field -> the value NVML gave), so the device is kept without it.
    """
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        bad[field] = repr(value)[:40]
        return None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bad[field] = f"{value}"[:40]
        return None
    return value


def build_dropping(model: type[Model], values: dict[str, Any], bad: dict[str, str]) -> Model:
    """Build the model; a field the model refuses is dropped (named in `bad`) and it tries again.

    The last guard of field-by-field checking: one impossible reading costs that field, never
    the device.
    """
    values = dict(values)
    for _ in range(len(values) + 1):
        try:
            return model(**values)
        except ValidationError as exc:
            dropped = False
            for error in exc.errors():
                name = str(error["loc"][0]) if error["loc"] else ""
                if name in values and values[name] is not None:
                    bad[name] = f"{values[name]}"[:40]
                    values[name] = None
                    dropped = True
            if not dropped:
                raise
    return model(**values)


def impossible_note(bad: dict[str, str]) -> str:
    """Say which readings NVML gave that cannot be, dropped while the device is kept."""
    return ("NVML gave readings that cannot be, left out (null): "
            + ", ".join(f"{field} = {value}" for field, value in bad.items()))


def _mw_to_w(value: Any) -> float | None:
    return None if value is None else round(int(value) / 1000.0, 2)


def _enabled(value: Any) -> bool | None:
    """NVML (current, pending) mode pairs and enable states -> bool of the current one."""
    if value is None:
        return None
    current = value[0] if isinstance(value, (list, tuple)) else value
    return bool(int(current))


@dataclass
class _LinkReading:
    """NVLink facts of one GPU as NVML gave them."""

    links_active: int | None = None
    nvml_version: int | None = None
    remote_bus_ids: list[str | None] = field(default_factory=list)


class NvidiaBackend:
    """NVIDIA GPUs through NVML; never raises for a missing library, driver or a lost GPU."""

    name = "nvidia"

    def __init__(self, nvml: Nvml | None = None, topo_runner: Runner | None = None) -> None:
        self._nvml = nvml
        self._topo_runner = topo_runner
        self._topo: TopoMatrix | None = None
        self._topo_read = False

    @property
    def nvml(self) -> Nvml:
        """The NVML helper in use (the process-wide one unless injected)."""
        return self._nvml or get_nvml()

    def probe(self) -> BackendResult:
        """Read every GPU NVML sees; no devices and a one-line note when there is no NVML."""
        nvml = self.nvml
        if not nvml.available():
            return BackendResult(notes=[f"no NVIDIA GPU: {nvml.reason}"])
        nvml.reset_findings()
        deadline = probe_deadline()
        nvml.set_deadline(deadline)
        count = nvml.device_count()
        if count == 0:
            reason = nvml.reason or "NVML sees no GPU"
            return BackendResult(notes=[f"no NVIDIA GPU: {reason}"])
        devices: list[Device] = []
        links: dict[int, _LinkReading] = {}
        for index in range(count):
            device = self._read_device(index)
            if device is not None:
                devices.append(device)
                links[index] = self._read_links(index)
        self._fill_peers(devices, links)
        return BackendResult(devices=devices, notes=self._notes(devices))

    # --- one GPU --------------------------------------------------------------------------
    def _read_device(self, index: int) -> Device | None:
        nvml = self.nvml
        name = nvml.query(index, "name", "nvmlDeviceGetName")
        if name is None:
            return None  # lost or unreadable before we even had a name: nothing honest to show
        bad: dict[str, str] = {}  # readings refused field by field: field -> what NVML gave
        memory = nvml.query(index, "memory", "nvmlDeviceGetMemoryInfo")
        memory_total = checked(getattr(memory, "total", None), "memory_total_bytes", bad, True)
        memory_used = checked(getattr(memory, "used", None), "memory_used_bytes", bad)
        cc_pair = nvml.query(index, "compute_capability", "nvmlDeviceGetCudaComputeCapability")
        cc = f"{cc_pair[0]}.{cc_pair[1]}" if cc_pair else None
        arch_value = nvml.query(index, "architecture", "nvmlDeviceGetArchitecture")
        brand = nvml.query(index, "brand", "nvmlDeviceGetBrand")
        bus_width = checked(nvml.query(index, "memory_bus_width", "nvmlDeviceGetMemoryBusWidth"),
                            "memory_bus_width_bits", bad, True)
        mem_clock_max = checked(nvml.query(index, "memory_clock_max",
                                           "nvmlDeviceGetMaxClockInfo", CLOCK_MEM),
                                "memory_clock_max_mhz", bad, True)
        bandwidth = theoretical_bandwidth_gbps(bus_width, mem_clock_max)
        power_limit_w = _mw_to_w(checked(nvml.query_first(index, "power_limit", (
            "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")),
            "power_limit_w", bad, True))
        pci = nvml.query(index, "pci_info", "nvmlDeviceGetPciInfo")
        clocks = nvml.current_clocks(index)
        ecc = _enabled(nvml.query(index, "ecc_mode", "nvmlDeviceGetEccMode"))
        details = build_dropping(NvidiaDetails, dict(
            architecture=architecture_for(arch_value, cc),
            brand=BRAND_NAMES.get(brand) if brand is not None else None,
            memory_bus_width_bits=bus_width,
            memory_clock_max_mhz=mem_clock_max,
            sm_clock_max_mhz=nvml.query(index, "sm_clock_max", "nvmlDeviceGetMaxClockInfo",
                                        CLOCK_SM),
            sm_clock_current_mhz=clocks["sm_mhz"],
            memory_clock_current_mhz=clocks["memory_mhz"],
            power_limit_w=power_limit_w,
            power_draw_w=_mw_to_w(checked(nvml.query(index, "power_draw",
                                                     "nvmlDeviceGetPowerUsage"),
                                          "power_draw_w", bad)),
            temperature_c=nvml.query(index, "temperature", "nvmlDeviceGetTemperature", 0),
            driver_version=nvml.system("driver_version", "nvmlSystemGetDriverVersion"),
            cuda_driver_version=cuda_version_text(
                nvml.system("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")),
            mig_mode=_enabled(nvml.query(index, "mig_mode", "nvmlDeviceGetMigMode")),
            ecc_enabled=ecc,
            throttle_reasons=nvml.throttle_reasons(index),
            memory_used_bytes=int(memory_used) if memory_used is not None else None,
            processes=nvml.gpu_processes(index),
            pci_device_id=f"0x{int(pci.pciDeviceId):08X}" if pci is not None else None,
            pci_bus_id=_pci_bus_id(pci),
        ), bad)
        if ecc:
            self._read_memory_health(index, details)
        device = build_dropping(Device, dict(
            index=index,
            vendor="nvidia",
            device_class=classify_device(name, brand),
            name=clean_name(name),
            memory_total_bytes=int(memory_total) if memory_total is not None else None,
            memory_type=None,
            memory_bandwidth_gbps=bandwidth,
            memory_bandwidth_source="probe" if bandwidth is not None else None,
            compute_capability=cc,
            architecture=details.architecture,
            compute_units=self._sm_count(index),
            formats=formats_for(cc),
            power_w=power_limit_w,
            # NVML's combined id is device << 16 | vendor (0x233510DE: device 0x2335 of 0x10DE)
            pci_device_id=f"0x{int(pci.pciDeviceId) >> 16:04x}" if pci is not None else None,
            source="probe",
            interconnect=Interconnect(pcie=self._read_pcie(index)),
            nvidia=details,
        ), bad)
        if bad:
            device.notes.append(impossible_note(bad))
        self._read_affinity(device)
        return device

    def _read_memory_health(self, index: int, details: NvidiaDetails) -> None:
        """Uncorrectable ECC errors and row-remap state: signs of failing GPU memory.

        Read only with ECC on: without it NVML has no counts, and asking would list them as
        unsupported on every consumer card.
        """
        nvml = self.nvml
        count = nvml.query(index, "ecc_errors_uncorrected", "nvmlDeviceGetTotalEccErrors",
                           ECC_UNCORRECTED, ECC_VOLATILE)
        details.ecc_errors_uncorrected = int(count) if count is not None else None
        rows = nvml.query(index, "remapped_rows", "nvmlDeviceGetRemappedRows")
        if isinstance(rows, (list, tuple)) and len(rows) >= 4:
            details.remapped_rows_pending = bool(rows[2])
            details.remapped_rows_failed = bool(rows[3])

    def _sm_count(self, index: int) -> int | None:
        """SM count from nvmlDeviceGetAttributes when the driver gives it (often MIG-only).

        nvmlDeviceGetNumGpuCores counts CUDA cores, not SMs, so it is not used.
        """
        attrs = self.nvml.query_first(index, "sm_count", ("nvmlDeviceGetAttributes_v2",
                                                          "nvmlDeviceGetAttributes"))
        count = getattr(attrs, "multiprocessorCount", None) if attrs is not None else None
        return int(count) if isinstance(count, int) and count > 0 else None

    def _read_pcie(self, index: int) -> PcieLink | None:
        nvml = self.nvml
        link = PcieLink(
            generation_max=nvml.query(index, "pcie_generation_max",
                                      "nvmlDeviceGetMaxPcieLinkGeneration"),
            generation_current=nvml.query(index, "pcie_generation_current",
                                          "nvmlDeviceGetCurrPcieLinkGeneration"),
            width_max=nvml.query(index, "pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
            width_current=nvml.query(index, "pcie_width_current",
                                     "nvmlDeviceGetCurrPcieLinkWidth"),
        )
        return None if link == PcieLink() else link

    def _read_affinity(self, device: Device) -> None:
        nvml = self.nvml
        words = max(1, math.ceil((os.cpu_count() or 64) / 64))
        cpu_masks = nvml.query(device.index, "cpu_affinity", "nvmlDeviceGetCpuAffinity", words)
        node_masks = nvml.query(device.index, "numa_affinity", "nvmlDeviceGetMemoryAffinity",
                                words, AFFINITY_SCOPE_NODE)  # pynvml wraps it in c_uint
        assert device.interconnect is not None
        if cpu_masks is not None:
            device.interconnect.cpu_affinity = cpu_ranges(cpus_from_masks(list(cpu_masks)))
        if node_masks is not None:
            nodes = cpus_from_masks(list(node_masks))
            # A GPU close to several nodes keeps the first; topo -m shows the same choice.
            device.interconnect.numa_node = nodes[0] if nodes else None

    def _read_links(self, index: int) -> _LinkReading:
        """Walk NVLink links 0..max-1, stopping at the first one NVML refuses (past the last)."""
        nvml = self.nvml
        reading = _LinkReading()
        max_links = int(nvml.constant("NVML_NVLINK_MAX_LINKS", 18))
        active = 0
        for link in range(max_links):
            state = nvml.probe_call(index, "nvmlDeviceGetNvLinkState", link)
            if state is None:
                if link == 0:
                    nvml.note_missing(index, "nvlink")  # no NVLink here, or not readable
                    return reading
                break  # past the last link this GPU has
            if int(state) != 1:
                continue
            active += 1
            if reading.nvml_version is None:
                reading.nvml_version = nvml.probe_call(index, "nvmlDeviceGetNvLinkVersion", link)
            remote = nvml.probe_call(index, "nvmlDeviceGetNvLinkRemotePciInfo", link)
            reading.remote_bus_ids.append(_normal_bus_id(_decode_bus(remote)))
        reading.links_active = active
        return reading

    # --- between GPUs ---------------------------------------------------------------------
    def _topology(self) -> TopoMatrix | None:
        """`nvidia-smi topo -m`, read at most once and only when NVML could not say."""
        if not self._topo_read:
            self._topo_read = True
            self._topo = read_topo_matrix(self._topo_runner)
        return self._topo

    def _fill_peers(self, devices: list[Device], links: dict[int, _LinkReading]) -> None:
        bus_ids = {d.index: _normal_bus_id(d.nvidia.pci_bus_id if d.nvidia else None)
                   for d in devices}
        gpu_buses = {bus for bus in bus_ids.values() if bus}
        for device in devices:
            reading = links.get(device.index, _LinkReading())
            generation = nvlink_generation(reading.nvml_version)
            interconnect = device.interconnect or Interconnect()
            if reading.links_active is not None:
                interconnect.nvlink = NvLinkInfo(
                    links_active=reading.links_active,
                    version=generation,
                    bandwidth_gbps=nvlink_bandwidth_gbps(reading.links_active, generation),
                )
            for peer in devices:
                if peer.index == device.index:
                    continue
                code = self._nvml_link_code(device.index, peer.index, reading,
                                            bus_ids.get(peer.index), gpu_buses)
                if code is None:
                    matrix = self._topology()
                    code = matrix.link(device.index, peer.index) if matrix else None
                interconnect.peers.append(PeerLink(
                    peer_index=peer.index, link=code, nvlinks=nvlinks_in_code(code),
                    p2p=self._p2p(device.index, peer.index),
                ))
            self._set_gpu_link(interconnect, reading, gpu_buses, len(devices))
            if len(devices) > 1 and self._topo is not None:
                # topo -m was read anyway: use it for affinity NVML did not give.
                if interconnect.cpu_affinity is None:
                    interconnect.cpu_affinity = self._topo.cpu_affinity.get(device.index)
                if interconnect.numa_node is None:
                    interconnect.numa_node = self._topo.numa_node.get(device.index)
            device.interconnect = interconnect

    @staticmethod
    def _set_gpu_link(interconnect: Interconnect, reading: _LinkReading,
                      gpu_buses: set[str], gpu_count: int) -> None:
        """Set the GPU-to-GPU link as NVML read it: NVLink when links are up, else PCIe.

        Nothing is set when NVML could not read the link state (no NVLink invented). Links
        that reach a bus which is no GPU go to an NVSwitch, which joins every GPU here; links
        whose far ends are all GPUs and reach one peer are a two-card bridge. The domain counts
        this GPU and its NVLink peers; it stays None when neither NVML nor topo -m said where
        the links go.
        """
        if reading.links_active is None:
            return
        pcie = interconnect.pcie
        if reading.links_active == 0:
            interconnect.gpu_link_kind = "pcie"
            interconnect.gpu_link_gbps = pcie_bandwidth_gbps(
                pcie.generation_max if pcie else None, pcie.width_max if pcie else None)
            interconnect.gpu_link_domain = 1
            return
        nvlink = interconnect.nvlink
        interconnect.gpu_link_gbps = nvlink.bandwidth_gbps if nvlink is not None else None
        remotes = [bus for bus in reading.remote_bus_ids if bus]
        switched = any(bus not in gpu_buses for bus in remotes)
        nvlink_peers = [p for p in interconnect.peers if p.nvlinks]
        bridge = bool(remotes) and not switched and len(nvlink_peers) == 1
        interconnect.gpu_link_kind = "nvlink-bridge" if bridge else "nvlink"
        if switched:
            interconnect.gpu_link_domain = gpu_count
        elif nvlink_peers or gpu_count == 1:
            interconnect.gpu_link_domain = 1 + len(nvlink_peers)

    def _nvml_link_code(self, index: int, peer: int, reading: _LinkReading,
                        peer_bus: str | None, gpu_buses: set[str]) -> str | None:
        """NVML's answer for the path to a peer (topo -m style code), None when NVML cannot say.

        Links whose far end is the peer's PCI bus id are direct links; links to a bus id that
        is no GPU here go to an NVSwitch, which reaches every peer over all of them (what
        topo -m prints as NV18 on HGX H100/H200 boards).
        """
        if reading.links_active:
            remotes = reading.remote_bus_ids
            if not remotes or any(bus is None for bus in remotes) or peer_bus is None:
                return None  # NVLink present but NVML cannot say where it goes
            direct = sum(1 for bus in remotes if bus == peer_bus)
            if direct:
                return f"NV{direct}"
            switched = sum(1 for bus in remotes if bus not in gpu_buses)
            if switched:
                return f"NV{switched}"
        peer_handle = self.nvml.handle(peer)
        if peer_handle is None:
            return None
        level = self.nvml.query(index, "topology_common_ancestor",
                                "nvmlDeviceGetTopologyCommonAncestor", peer_handle)
        return NVML_TOPOLOGY_LEVEL_TO_CODE.get(level) if level is not None else None

    def _p2p(self, index: int, peer: int) -> bool | None:
        """Peer-to-peer read access between two GPUs per NVML; None when NVML cannot say."""
        peer_handle = self.nvml.handle(peer)
        if peer_handle is None:
            return None
        status = self.nvml.query(index, "p2p_status", "nvmlDeviceGetP2PStatus", peer_handle,
                                 c_uint(P2P_CAPS_INDEX_READ))
        return None if status is None else int(status) == P2P_STATUS_OK

    # --- notes ----------------------------------------------------------------------------
    def _notes(self, devices: list[Device]) -> list[str]:
        """One line for fields NVML could not read (not twenty), one per lost GPU."""
        nvml = self.nvml
        notes: list[str] = []
        by_index = {d.index: d for d in devices}
        for index, fields in sorted(nvml.missing.items()):
            if index in by_index and by_index[index].nvidia is not None:
                by_index[index].nvidia.unsupported_fields = list(fields)  # type: ignore[union-attr]
        summary = sorted({f for i, fs in nvml.missing.items() if i in by_index for f in fs})
        if summary:
            notes.append("NVML could not read (not supported on this GPU/driver): "
                         + ", ".join(summary))
        for index, why in sorted(nvml.lost.items()):
            notes.append(f"GPU {index}: {why}; its later fields are null")
            if index in by_index:
                by_index[index].notes.append(why)
        if nvml.reason:
            notes.append(f"NVML stopped answering: {nvml.reason}")
        if nvml.late:
            notes.append(f"NVML answered slowly: the probe stopped asking after its "
                         f"{probe_deadline():g} s budget ({PROBE_DEADLINE_ENV}); left unread "
                         f"(null): {', '.join(nvml.late[:8])}"
                         + (f" and {len(nvml.late) - 8} more" if len(nvml.late) > 8 else ""))
        for device in devices:
            notes += [f"GPU {device.index}: {n}" for n in device.notes
                      if n.startswith("NVML gave readings")]
        return notes


def _decode_bus(pci: Any) -> str | None:
    if pci is None:
        return None
    value = getattr(pci, "busId", None)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return str(value) if value else None


def _pci_bus_id(pci: Any) -> str | None:
    return _decode_bus(pci)
