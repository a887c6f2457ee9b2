"""FakeNvml: replays real NVML readings through the same interface as the pynvml module.

Sources (tests/fixtures/, copied from the shared fixtures taken on real machines):
- nvidia-h200/nvml-and-torch-readings.json: NVML values read with nvidia-ml-py on one H200.
- nvidia-h200/nvidia-smi-q-x.xml: fields the JSON lacks (current clocks, ECC, MIG, PCIe
  current, processes, clocks-event reasons, temperature, power draw, PCI ids, memory used).
- nvidia-h200x2/: nvidia-smi -q text (per-GPU bus id, memory used, clocks, reasons, power),
  nvml-links.json (NVLink state and version per link, torch's can_device_access_peer) and
  nvidia-smi topo -m. Static facts of the model that the x2 files do not repeat (bus width, max
  clocks, cc, brand, arch) are taken from the single-H200 readings: same GPU model and driver.

A reading the fixtures do not have is answered with NVMLError_NotSupported, never invented.
Scenarios: no module, library not found, driver not loaded, a GPU lost on one field, a field
not supported, two GPUs.
"""

from __future__ import annotations

import ctypes
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
H200_DIR = FIXTURES / "nvidia-h200"
H200X2_DIR = FIXTURES / "nvidia-h200x2"
MIB = 1024 * 1024

# --- pynvml's error classes: NVMLError(value) with one subclass per code ---------------------
ERROR_CODES = {
    "Uninitialized": 1, "InvalidArgument": 2, "NotSupported": 3, "NoPermission": 4,
    "NotFound": 6, "DriverNotLoaded": 9, "Timeout": 10, "LibraryNotFound": 12,
    "FunctionNotFound": 13, "GpuIsLost": 15, "ResetRequired": 16, "LibRmVersionMismatch": 18,
    "Unknown": 999,
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in `.value`."""

    _by_code: dict[int, type] = {}

    def __new__(cls, value: int = 999):
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int = 999):
        super().__init__(value)

    def __str__(self) -> str:
        names = {code: name for name, code in ERROR_CODES.items()}
        return names.get(self.value, f"NVML Error with code {self.value}")


def _make_error_class(name: str, code: int) -> type:
    def new(cls, *args):
        return NVMLError.__new__(cls, code)

    def init(self, *args):
        Exception.__init__(self, code)

    cls = type(f"NVMLError_{name}", (NVMLError,), {"__new__": new, "__init__": init})
    NVMLError._by_code[code] = cls
    return cls


ERROR_CLASSES = {name: _make_error_class(name, code) for name, code in ERROR_CODES.items()}
NVMLError_NotSupported = ERROR_CLASSES["NotSupported"]
NVMLError_GpuIsLost = ERROR_CLASSES["GpuIsLost"]
NVMLError_LibraryNotFound = ERROR_CLASSES["LibraryNotFound"]
NVMLError_DriverNotLoaded = ERROR_CLASSES["DriverNotLoaded"]


# --- readings of one GPU --------------------------------------------------------------------
@dataclass
class FakeGpu:
    """What NVML answers for one GPU; None = the call raises NVMLError_NotSupported."""

    name: str
    brand: int | None = None
    arch: int | None = None
    cc: tuple[int, int] | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    bus_width: int | None = None
    max_clocks: dict[int, int] = field(default_factory=dict)  # NVML_CLOCK_* -> MHz
    clocks: dict[int, int] = field(default_factory=dict)
    pcie_gen_max: int | None = None
    pcie_gen_current: int | None = None
    pcie_width_max: int | None = None
    pcie_width_current: int | None = None
    power_limit_mw: int | None = None
    power_usage_mw: int | None = None
    temperature_c: int | None = None
    mig: tuple[int, int] | None = None
    ecc: tuple[int, int] | None = None
    ecc_uncorrected_volatile: int | None = None
    remapped_rows: tuple[int, int, int, int] | None = None  # corrected, uncorrected, pending, fail
    clocks_event_reasons: int | None = None
    processes: list[tuple[int, int | None]] | None = None  # (pid, used bytes)
    process_names: dict[int, str] = field(default_factory=dict)
    pci_device_id: int | None = None
    bus_id: str | None = None
    nvlinks: list[tuple[int, int]] | None = None  # (state, NVML version) per link
    cpu_affinity: list[int] | None = None  # 64-bit words
    memory_affinity: list[int] | None = None
    p2p_status: dict[int, int] = field(default_factory=dict)  # peer index -> status


@dataclass
class FakeHandle:
    index: int


class _Reading:
    """One plain getter: nvmlDeviceGetX(handle) -> that GPU's field, NotSupported when None."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.function = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.function = name  # the NVML function it stands for, as calls and faults name it

    def __get__(self, fake: Any, owner: type | None = None) -> Any:
        def read(h: FakeHandle) -> Any:
            return fake._value(getattr(fake._gpu(h, self.function), self.field))

        return read


class FakeNvml:
    """Quacks like the pynvml module for the calls hwadvisor makes."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_NVLINK_MAX_LINKS = 36  # what nvidia-ml-py 13 defines
    NVML_P2P_CAPS_INDEX_READ = (0,)  # pynvml really defines it as `0,`

    def __init__(self, gpus: list[FakeGpu], driver: str = "580.159.04",
                 cuda_driver: int = 13000, init_error: int | None = None,
                 not_supported: set[tuple[int, str]] | None = None,
                 lose_on: tuple[int, str] | None = None) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.init_error = init_error
        self.not_supported = not_supported or set()
        self.lose_on = lose_on
        self.lost: set[int] = set()
        self.initialized = False
        self.calls: list[tuple[str, int | None]] = []
        for name, cls in ERROR_CLASSES.items():
            setattr(self, f"NVMLError_{name}", cls)

    # --- library ---
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def _need_init(self) -> None:
        if not self.initialized:
            raise NVMLError(ERROR_CODES["Uninitialized"])

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return self.cuda_driver

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._need_init()
        for gpu in self.gpus:
            if pid in gpu.process_names:
                return gpu.process_names[pid]
        raise NVMLError(ERROR_CODES["NotFound"])

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._need_init()
        if index >= len(self.gpus):
            raise NVMLError(ERROR_CODES["InvalidArgument"])
        if index in self.lost:
            raise NVMLError(ERROR_CODES["GpuIsLost"])
        return FakeHandle(index)

    # --- per-GPU plumbing ---
    def _gpu(self, handle: FakeHandle, function: str) -> FakeGpu:
        self._need_init()
        self.calls.append((function, handle.index))
        if handle.index in self.lost:
            raise NVMLError(ERROR_CODES["GpuIsLost"])
        if self.lose_on == (handle.index, function):
            self.lost.add(handle.index)
            raise NVMLError(ERROR_CODES["GpuIsLost"])
        if (handle.index, function) in self.not_supported:
            raise NVMLError(ERROR_CODES["NotSupported"])
        return self.gpus[handle.index]

    @staticmethod
    def _value(value: Any) -> Any:
        if value is None:
            raise NVMLError(ERROR_CODES["NotSupported"])
        return value

    def nvmlDeviceGetName(self, h: FakeHandle) -> bytes:
        # Older nvidia-ml-py returned bytes: the helper must decode.
        return self._value(self._gpu(h, "nvmlDeviceGetName").name).encode()

    nvmlDeviceGetBrand = _Reading("brand")

    nvmlDeviceGetArchitecture = _Reading("arch")

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeHandle) -> tuple[int, int]:
        return self._value(self._gpu(h, "nvmlDeviceGetCudaComputeCapability").cc)

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        total = self._value(gpu.memory_total)
        used = gpu.memory_used or 0
        return SimpleNamespace(total=total, used=used, free=total - used)

    nvmlDeviceGetMemoryBusWidth = _Reading("bus_width")

    def nvmlDeviceGetMaxClockInfo(self, h: FakeHandle, clock: int) -> int:
        return self._value(self._gpu(h, "nvmlDeviceGetMaxClockInfo").max_clocks.get(clock))

    def nvmlDeviceGetClockInfo(self, h: FakeHandle, clock: int) -> int:
        ctypes.c_uint(clock)  # as pynvml does: the clock type must be a plain int
        return self._value(self._gpu(h, "nvmlDeviceGetClockInfo").clocks.get(clock))

    nvmlDeviceGetMaxPcieLinkGeneration = _Reading("pcie_gen_max")

    nvmlDeviceGetCurrPcieLinkGeneration = _Reading("pcie_gen_current")

    nvmlDeviceGetMaxPcieLinkWidth = _Reading("pcie_width_max")

    nvmlDeviceGetCurrPcieLinkWidth = _Reading("pcie_width_current")

    nvmlDeviceGetEnforcedPowerLimit = _Reading("power_limit_mw")

    nvmlDeviceGetPowerManagementLimit = _Reading("power_limit_mw")

    nvmlDeviceGetPowerUsage = _Reading("power_usage_mw")

    def nvmlDeviceGetTemperature(self, h: FakeHandle, sensor: int) -> int:
        return self._value(self._gpu(h, "nvmlDeviceGetTemperature").temperature_c)

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> list[int]:
        return list(self._value(self._gpu(h, "nvmlDeviceGetMigMode").mig))

    def nvmlDeviceGetEccMode(self, h: FakeHandle) -> list[int]:
        return list(self._value(self._gpu(h, "nvmlDeviceGetEccMode").ecc))

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, error_type: int, counter: int) -> int:
        gpu = self._gpu(h, "nvmlDeviceGetTotalEccErrors")
        if (error_type, counter) != (1, 0):  # only uncorrected volatile counts are replayed
            raise ERROR_CLASSES["NotSupported"]()
        return self._value(gpu.ecc_uncorrected_volatile)

    def nvmlDeviceGetRemappedRows(self, h: FakeHandle) -> tuple[int, int, int, int]:
        return self._value(self._gpu(h, "nvmlDeviceGetRemappedRows").remapped_rows)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeHandle) -> int:
        gpu = self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons")
        return self._value(gpu.clocks_event_reasons)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeHandle) -> int:
        gpu = self._gpu(h, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._value(gpu.clocks_event_reasons)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeHandle) -> list[SimpleNamespace]:
        gpu = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        procs = self._value(gpu.processes)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeHandle) -> list[SimpleNamespace]:
        self._gpu(h, "nvmlDeviceGetGraphicsRunningProcesses")
        return []  # nvidia-smi lists only type C (compute) processes on these hosts

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self._value(gpu.bus_id).encode(),
                               pciDeviceId=self._value(gpu.pci_device_id))

    def nvmlDeviceGetAttributes_v2(self, h: FakeHandle) -> Any:
        self._gpu(h, "nvmlDeviceGetAttributes_v2")
        raise NVMLError(ERROR_CODES["NotSupported"])  # no reading in the fixtures

    def nvmlDeviceGetCpuAffinity(self, h: FakeHandle, words: int) -> list[int]:
        return list(self._value(self._gpu(h, "nvmlDeviceGetCpuAffinity").cpu_affinity))

    def nvmlDeviceGetMemoryAffinity(self, h: FakeHandle, words: int, scope: Any) -> list[int]:
        ctypes.c_uint(scope)  # pynvml wraps scope in c_uint: a ctypes value here raises TypeError
        return list(self._value(self._gpu(h, "nvmlDeviceGetMemoryAffinity").memory_affinity))

    def nvmlDeviceGetNvLinkState(self, h: FakeHandle, link: int) -> int:
        links = self._gpu(h, "nvmlDeviceGetNvLinkState").nvlinks
        if not links:
            raise NVMLError(ERROR_CODES["NotSupported"])  # the single H200: raised for link 0
        if link >= len(links):
            raise NVMLError(ERROR_CODES["InvalidArgument"])
        return links[link][0]

    def nvmlDeviceGetNvLinkVersion(self, h: FakeHandle, link: int) -> int:
        links = self._gpu(h, "nvmlDeviceGetNvLinkVersion").nvlinks
        if not links or link >= len(links):
            raise NVMLError(ERROR_CODES["InvalidArgument"])
        return links[link][1]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: FakeHandle, link: int) -> Any:
        self._gpu(h, "nvmlDeviceGetNvLinkRemotePciInfo")
        raise NVMLError(ERROR_CODES["NotSupported"])  # no reading in the fixtures

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: FakeHandle, h2: FakeHandle) -> int:
        self._gpu(h1, "nvmlDeviceGetTopologyCommonAncestor")
        raise NVMLError(ERROR_CODES["NotSupported"])  # no reading in the fixtures

    def nvmlDeviceGetP2PStatus(self, h1: FakeHandle, h2: FakeHandle, index: Any) -> int:
        gpu = self._gpu(h1, "nvmlDeviceGetP2PStatus")
        # On the H200x2 host this raised ctypes.ArgumentError when the capability index was
        # not a ctypes value (pynvml's constant is the tuple `(0,)`): replay that.
        if not isinstance(index, ctypes.c_uint):
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert")
        status = gpu.p2p_status.get(h2.index)
        return self._value(status)


def no_module_loader() -> Any:
    """A loader for Nvml(loader=...) behaving as if nvidia-ml-py is not installed."""
    raise ImportError("No module named 'pynvml'")


# --- fixture parsing -------------------------------------------------------------------------
def _number(text: str | None) -> int | None:
    if text is None:
        return None
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return None if match is None else int(float(match.group(1)))


def _milli(text: str | None) -> int | None:
    if text is None:
        return None
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*W", text)
    return None if match is None else round(float(match.group(1)) * 1000)


# nvidia-smi's clocks-event reason names -> NVML bits (nvml.h nvmlClocksEventReason*).
SMI_REASON_BITS = {
    "gpu_idle": 0x1, "idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100, "display_clock_setting": 0x100,
}


def _xml_readings(path: Path) -> dict[str, Any]:
    gpu = ET.parse(path).getroot().find("gpu")
    assert gpu is not None

    def text(xpath: str) -> str | None:
        node = gpu.find(xpath)
        return None if node is None or node.text is None else node.text.strip()

    reasons = 0
    for node in gpu.find("clocks_event_reasons") or []:
        key = node.tag.removeprefix("clocks_event_reason_")
        if (node.text or "").strip() == "Active":
            reasons |= SMI_REASON_BITS[key]
    processes = []
    names = {}
    for proc in gpu.findall("processes/process_info"):
        used = _number(proc.findtext("used_memory"))
        pid = int(proc.findtext("pid") or 0)
        processes.append((pid, used * MIB if used is not None else None))
        names[pid] = proc.findtext("process_name")
    return {
        "memory_used": (_number(text("fb_memory_usage/used")) or 0) * MIB,
        "sm_clock": _number(text("clocks/sm_clock")),
        "mem_clock": _number(text("clocks/mem_clock")),
        "pcie_gen_current": _number(text("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
        "pcie_width_current": _number(text("pci/pci_gpu_link_info/link_widths/current_link_width")),
        "power_usage_mw": _milli(text("gpu_power_readings/average_power_draw")),
        "temperature_c": _number(text("temperature/gpu_temp")),
        "mig": (0, 0) if text("mig_mode/current_mig") == "Disabled" else (1, 1),
        "ecc": (1 if text("ecc_mode/current_ecc") == "Enabled" else 0,
                1 if text("ecc_mode/pending_ecc") == "Enabled" else 0),
        "clocks_event_reasons": reasons,
        "ecc_uncorrected_volatile": _volatile_uncorrected(gpu),
        "remapped_rows": _remapped_rows(gpu),
        "processes": processes,
        "process_names": names,
        "pci_device_id": int(text("pci/pci_device_id") or "0", 16),
        "bus_id": text("pci/pci_bus_id"),
    }


def _volatile_uncorrected(gpu: ET.Element) -> int | None:
    """Uncorrectable volatile ECC errors as NVML's total counts them (DRAM + SRAM)."""
    names = ("dram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")
    values = [_number(gpu.findtext(f"ecc_errors/volatile/{n}")) for n in names]
    return None if all(v is None for v in values) else sum(v or 0 for v in values)


def _remapped_rows(gpu: ET.Element) -> tuple[int, int, int, int] | None:
    rows = gpu.find("remapped_rows")
    if rows is None or _number(rows.findtext("remapped_row_corr")) is None:
        return None
    return (_number(rows.findtext("remapped_row_corr")) or 0,
            _number(rows.findtext("remapped_row_unc")) or 0,
            int(rows.findtext("remapped_row_pending") == "Yes"),
            int(rows.findtext("remapped_row_failure") == "Yes"))


def _smi_text_blocks(path: Path) -> list[dict[tuple[str, str], str]]:
    """nvidia-smi -q text -> one {(section, key): value} per GPU (first occurrence kept)."""
    blocks: list[dict[tuple[str, str], str]] = []
    section = ""
    for line in path.read_text().splitlines():
        if line.startswith("GPU 0000"):
            blocks.append({("", "Bus Id"): line.split()[1]})
            continue
        if not blocks or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        key, value = key.strip(), value.strip()
        if indent == 4:
            section = key
            if sep and value:
                blocks[-1].setdefault((key, ""), value)
        elif indent >= 8 and sep:
            blocks[-1].setdefault((section, key), value)
    return blocks


# nvidia-smi -q text's reason labels -> the XML names above.
SMI_TEXT_REASONS = {
    "Idle": "gpu_idle", "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap", "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown", "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown", "Display Clock Setting": "display_clock_setting",
}


def h200_gpu() -> FakeGpu:
    """The single H200 of tests/fixtures/nvidia-h200/."""
    data = json.loads((H200_DIR / "nvml-and-torch-readings.json").read_text())["nvml"]
    xml = _xml_readings(H200_DIR / "nvidia-smi-q-x.xml")
    return FakeGpu(
        name=data["name"],
        brand=data["brand"],
        arch=data["arch"],
        cc=tuple(data["cc"]),
        memory_total=data["mem_total"],
        memory_used=xml["memory_used"],
        bus_width=data["bus_width"],
        max_clocks={2: data["max_mem_clock_mhz"], 1: data["max_sm_clock_mhz"]},
        clocks={1: xml["sm_clock"], 2: xml["mem_clock"]},
        pcie_gen_max=data["pcie_gen_max"],
        pcie_gen_current=xml["pcie_gen_current"],
        pcie_width_max=data["pcie_width_max"],
        pcie_width_current=xml["pcie_width_current"],
        power_limit_mw=round(data["power_limit_w"] * 1000),
        power_usage_mw=xml["power_usage_mw"],
        temperature_c=xml["temperature_c"],
        mig=xml["mig"],
        ecc=xml["ecc"],
        ecc_uncorrected_volatile=xml["ecc_uncorrected_volatile"],
        remapped_rows=xml["remapped_rows"],
        clocks_event_reasons=xml["clocks_event_reasons"],
        processes=xml["processes"],
        process_names=xml["process_names"],
        pci_device_id=xml["pci_device_id"],
        bus_id=xml["bus_id"],
        nvlinks=data["nvlink_states"] or None,  # [] on this host: link 0 raised
        cpu_affinity=[0xFFFF],  # topo -m: CPU Affinity 0-15
        memory_affinity=[0x1],  # topo -m: NUMA Affinity 0
    )


def h200x2_gpus() -> list[FakeGpu]:
    """The two H200s of tests/fixtures/nvidia-h200x2/."""
    links = json.loads((H200X2_DIR / "nvml-links.json").read_text())["gpus"]
    blocks = _smi_text_blocks(H200X2_DIR / "nvidia-smi-q.txt")
    gpus = []
    for reading, block in zip(links, blocks, strict=True):
        base = h200_gpu()
        reasons = 0
        for label, key in SMI_TEXT_REASONS.items():
            if block.get(("Clocks Event Reasons", label)) == "Active":
                reasons |= SMI_REASON_BITS[key]
        peers = [p for p in range(len(links)) if p != reading["index"]]
        base.name = reading["name"]
        base.bus_id = block[("", "Bus Id")]
        base.memory_used = (_number(block.get(("FB Memory Usage", "Used"))) or 0) * MIB
        base.clocks = {1: _number(block.get(("Clocks", "SM"))),
                       2: _number(block.get(("Clocks", "Memory")))}
        base.power_usage_mw = _milli(block.get(("GPU Power Readings", "Average Power Draw")))
        base.temperature_c = _number(block.get(("Temperature", "GPU Current Temp")))
        base.clocks_event_reasons = reasons
        base.processes = [] if block.get(("Processes", "")) == "None" else None
        base.nvlinks = [(link["state"], link["version"]) for link in reading["nvlink"]]
        base.cpu_affinity = [0xFFFFFFFF]  # topo -m: CPU Affinity 0-31
        base.memory_affinity = [0x1]
        # NVML's P2P status was never read with a proper argument on that host; torch's
        # can_device_access_peer (same driver question) stands in: True -> NVML_P2P_STATUS_OK.
        can_access = reading["torch_can_access_peer"]
        base.p2p_status = {peer: 0 if ok else 5
                           for peer, ok in zip(peers, can_access, strict=False)}
        gpus.append(base)
    return gpus


def h200_fake(**kwargs: Any) -> FakeNvml:
    """FakeNvml with the single H200."""
    return FakeNvml([h200_gpu()], **kwargs)


def h200x2_fake(**kwargs: Any) -> FakeNvml:
    """FakeNvml with the two NVLinked H200s."""
    return FakeNvml(h200x2_gpus(), **kwargs)


def topo_runner(directory: Path):
    """A runner for read_topo_matrix that returns a fixture's `nvidia-smi topo -m` text."""
    text = (directory / "nvidia-smi-topo-m.txt").read_text()
    calls: list[list[str]] = []

    def run(argv: list[str], timeout_s: float) -> str:
        calls.append(list(argv))
        return text

    run.calls = calls  # type: ignore[attr-defined]
    return run
