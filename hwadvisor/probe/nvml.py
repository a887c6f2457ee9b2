"""The one door to NVML: every NVML call in hwadvisor goes through `Nvml`.

It starts NVML once, on first use; decodes bytes; turns "not supported" style errors into
`None` while remembering which field was missing (so the probe prints one note, not twenty);
and survives a missing `pynvml` module, a missing library or driver, and a GPU lost mid-probe.
The backend (the real `pynvml` module, or tests' `FakeNvml`) is injectable: anything with
pynvml's functions, constants and `NVMLError` (errors carry pynvml's numeric `.value`).
The shape follows nvitop's `nvmlQuery` (https://github.com/XuehaiPan/nvitop).

Every call into the backend, nvmlInit included, runs on one worker thread behind a deadline
(`_Door`): a wedged driver or a GPU stuck in reset can hang any NVML call, not only the first.
A call still running at the deadline closes the door: NVML is not used again in this process,
the call is named in the probe's note, and the probe carries on (the report is still written).
"""

from __future__ import annotations

import ctypes
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from hwadvisor.models import GpuProcess

# NVML return codes (nvml.h, NVML_ERROR_*), grouped by what they mean for the probe.
# Kept here as plain numbers so the classification works for any backend, real or fake.
ERROR_UNINITIALIZED = 1
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_UNKNOWN = 999

# NVML as a whole is unusable after these: no devices, one note saying why.
LIBRARY_ERRORS: dict[int, str] = {
    ERROR_LIBRARY_NOT_FOUND: "NVML library not found (is the NVIDIA driver installed?)",
    ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded (is the kernel module loaded? "
                             "try nvidia-smi)",
    ERROR_UNINITIALIZED: "NVML could not be initialized",
    ERROR_LIB_RM_VERSION_MISMATCH: "NVML library and driver versions differ "
                                   "(reboot after a driver update?)",
}
# The GPU stopped answering: every later query on it is skipped and the device is marked lost.
GPU_LOST_ERRORS: dict[int, str] = {
    ERROR_GPU_IS_LOST: "GPU is lost (fell off the bus?)",
    ERROR_RESET_REQUIRED: "GPU requires a reset",
    ERROR_UNKNOWN: "NVML returned an unknown error",
}

# An NVML call that never returns (a wedged driver, a GPU stuck in reset) must not hang every
# command: each call gets this long, then the probe carries on without NVML, with a note.
INIT_TIMEOUT_S = 10.0
INIT_TIMEOUT_ENV = "HWADVISOR_NVML_TIMEOUT_S"

# Clock types (nvml.h nvmlClockType_t).
CLOCK_SM = 1
CLOCK_MEM = 2

# nvmlClocksEventReasons bits (nvml.h; the older name is ...ClocksThrottleReason...), as data.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal_slowdown"),
    (0x0040, "hw_thermal_slowdown"),
    (0x0080, "hw_power_brake_slowdown"),
    (0x0100, "display_clock_setting"),
)


def decode_clock_event_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clocks-event (throttle) reasons bitmask."""
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]


def _decode(value: Any) -> Any:
    """Bytes to str (older pynvml returns bytes for names and versions)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


# Where a loaded NVIDIA driver shows on Linux: its procfs folder and control device (also in
# containers run with the NVIDIA toolkit), and WSL2's GPU device (NVML there comes from
# /usr/lib/wsl/lib, with no /proc/driver/nvidia).
DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def driver_absent() -> str | None:
    """Why NVML cannot work here, when that is plain without loading it; None otherwise.

    Importing pynvml and searching for libnvidia-ml costs ~10 ms, a share of the probe's
    start-up on the many hosts that have no NVIDIA GPU. Only Linux and macOS are judged:
    elsewhere NVML is tried.
    """
    if sys.platform == "darwin":
        return "macOS has no NVIDIA driver (NVML)"
    if sys.platform.startswith("linux") and not any(os.path.exists(p) for p in DRIVER_PATHS):
        return f"no NVIDIA driver loaded (none of {', '.join(DRIVER_PATHS)})"
    return None


class NvmlStuck(Exception):
    """An NVML call did not return within the deadline; NVML is not used again."""

    def __init__(self, function: str, timeout_s: float) -> None:
        super().__init__(
            f"NVML call {function} did not return within {timeout_s:g} s (a hung driver or "
            f"GPU?); carrying on without NVML (set {INIT_TIMEOUT_ENV} to wait longer)")
        self.function = function


class _Door:
    """Runs backend calls on one daemon worker thread, each with a deadline.

    One long-lived worker rather than a thread per call: a probe makes about a hundred NVML
    calls, and starting a thread for each would cost the probe's start-up. A worker stuck in a
    call is left behind (a daemon: it cannot be killed and does not keep the process alive);
    the door then stays closed and names the call that hung.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.stuck: NvmlStuck | None = None
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], list[Any],
                                            threading.Event] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            func, args, box, done = job
            try:
                box.append((True, func(*args)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                box.append((False, exc))
            done.set()

    def call(self, name: str, func: Callable[..., Any], *args: Any) -> Any:
        """Return func(*args) run on the worker; NvmlStuck past the deadline (and from then on)."""
        if self.stuck is not None:
            raise self.stuck
        if self._worker is None:
            self._worker = threading.Thread(target=self._serve, name="hwadvisor-nvml",
                                            daemon=True)
            self._worker.start()
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((func, args, box, done))
        if not done.wait(self.timeout_s):
            self.stuck = NvmlStuck(name, self.timeout_s)
            raise self.stuck
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Let an idle worker end (a stuck one is left behind)."""
        if self._worker is not None and self.stuck is None:
            self._jobs.put(None)
        self._worker = None


def _import_pynvml() -> Any:
    import pynvml  # imported on first use only: keeps `import hwadvisor` light

    return pynvml


class Nvml:
    """A lazily started NVML session over an injectable backend (pynvml or a fake)."""

    def __init__(self, backend: Any | None = None,
                 loader: Callable[[], Any] | None = None,
                 init_timeout_s: float | None = None) -> None:
        self._backend: Any = backend
        self._loader = loader or _import_pynvml
        # Only the real library is skipped on a host without a driver; injected ones run.
        self._driver_check = driver_absent if backend is None and loader is None else None
        self._init_timeout_s = init_timeout_s
        self._door: _Door | None = None
        self._started = False
        self._reason: str | None = None
        self._handles: dict[int, Any] = {}
        self.lost: dict[int, str] = {}
        self.missing: dict[int, list[str]] = {}
        self.late: list[str] = []  # fields left unread once the probe's deadline passed
        self._deadline: float | None = None

    # --- session -----------------------------------------------------------------------
    def start(self) -> bool:
        """Start NVML (once); False, with `reason` set, when there is no usable NVML."""
        if self._started:
            return self._reason is None
        self._started = True
        if self._backend is None:
            absent = self._driver_check() if self._driver_check is not None else None
            if absent is not None:
                self._reason = absent
                return False
            try:
                self._backend = self._loader()
            except ImportError:
                self._reason = ("the nvidia-ml-py package (module pynvml) is not installed; "
                                "pip install nvidia-ml-py")
                return False
        self._reason = self._init_within_deadline()
        return self._reason is None

    def _init_within_deadline(self) -> str | None:
        """Run nvmlInit through the door; return why NVML is unusable, or None."""
        timeout = self._init_timeout_s if self._init_timeout_s is not None else init_timeout()
        self._door = _Door(timeout)
        try:
            self._call("nvmlInit")
        except NvmlStuck:
            self._backend = None  # never call into a library stuck in its start-up
            return (f"NVML did not start within {timeout:g} s (a hung driver or GPU?); "
                    f"carrying on without it (set {INIT_TIMEOUT_ENV} to wait longer)")
        except Exception as exc:
            return self._library_reason(exc)  # any failure to start means "no NVML here"
        return None

    def _call(self, function: str, *args: Any) -> Any:
        """Call the backend's `function(*args)` through the door (its deadline); bytes decoded."""
        func = getattr(self._backend, function)
        if self._door is None:  # not started through start(): no deadline to keep
            return _decode(func(*args))
        return _decode(self._door.call(function, func, *args))

    @property
    def stuck(self) -> str | None:
        """The NVML function that did not return in time, if one hung."""
        stuck = self._door.stuck if self._door is not None else None
        return stuck.function if stuck is not None else None

    @property
    def backend(self) -> Any:
        """The started backend module (None when NVML is unavailable)."""
        return self._backend if self.start() else None

    @property
    def reason(self) -> str | None:
        """Why NVML is unavailable (None when it works)."""
        self.start()
        return self._reason

    def available(self) -> bool:
        """Return True when NVML started."""
        return self.start()

    def reset_findings(self) -> None:
        """Forget missing fields and lost GPUs from an earlier probe (a new probe starts clean)."""
        self.missing.clear()
        self.lost.clear()
        self._handles.clear()
        self.late = []
        self._deadline = None

    def set_deadline(self, seconds: float) -> None:
        """Answer null to every read once `seconds` from now have passed (named in `late`)."""
        self._deadline = time.monotonic() + seconds

    def _past_deadline(self, field: str) -> bool:
        """Tell whether the probe's budget is spent; remember the field left unread."""
        if self._deadline is None or time.monotonic() < self._deadline:
            return False
        if field not in self.late:
            self.late.append(field)
        return True

    def shutdown(self) -> None:
        """Shut NVML down if it was started (safe to call twice)."""
        if self._started and self._reason is None and self._backend is not None:
            try:
                self._call("nvmlShutdown")
            except Exception:  # shutting down must never fail the probe
                pass
        if self._door is not None:
            self._door.close()
            self._door = None
        self._started = False
        self._reason = None
        self._handles.clear()

    def _library_reason(self, exc: Exception) -> str:
        if isinstance(exc, NvmlStuck):
            return str(exc)
        code = getattr(exc, "value", None)
        if isinstance(code, int) and code in LIBRARY_ERRORS:
            return LIBRARY_ERRORS[code]
        if isinstance(code, int) and code in GPU_LOST_ERRORS:
            return GPU_LOST_ERRORS[code]
        return f"NVML failed to start: {exc}"

    # --- queries -----------------------------------------------------------------------
    def device_count(self) -> int:
        """How many GPUs NVML sees (0 without NVML)."""
        if not self.start():
            return 0
        try:
            return int(self._call("nvmlDeviceGetCount"))
        except Exception as exc:
            self._reason = self._library_reason(exc)
            return 0

    def handle(self, index: int) -> Any | None:
        """Return the NVML handle of GPU `index` (None when unavailable or lost)."""
        if index in self._handles:
            return self._handles[index]
        if not self.start() or index in self.lost:
            return None
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
        except Exception as exc:
            self._classify(index, "handle", exc)
            return None
        self._handles[index] = handle
        return handle

    def system(self, field: str, function: str, *args: Any) -> Any | None:
        """Call a system-wide NVML function (no handle); None when it cannot be read."""
        if self._past_deadline(field):
            return None
        if not self.start():
            return None
        try:
            return self._call(function, *args)
        except Exception as exc:
            self._classify(-1, field, exc)
            return None

    def query(self, index: int, field: str, function: str, *args: Any) -> Any | None:
        """Call `function(handle, *args)` for GPU `index`; None (and `field` noted) on failure."""
        if self._past_deadline(field):
            return None
        handle = self.handle(index)
        if handle is None:
            return None
        func = getattr(self._backend, function, None)
        if func is None:
            # An older nvidia-ml-py without this function: the same as "not supported".
            self.note_missing(index, field)
            return None
        try:
            return self._call(function, handle, *args)
        except Exception as exc:  # see _classify
            self._classify(index, field, exc)
            return None

    def query_first(self, index: int, field: str, functions: tuple[str, ...],
                    *args: Any) -> Any | None:
        """Like `query`, trying each function name in turn (new names first, then old ones)."""
        if self._past_deadline(field):
            return None
        if not self.start():
            return None
        for function in functions:
            if getattr(self._backend, function, None) is None or index in self.lost:
                continue
            handle = self.handle(index)
            if handle is None:
                return None
            try:
                return self._call(function, handle, *args)
            except Exception as exc:
                if self._is_fatal(index, field, exc):
                    return None
        self.note_missing(index, field)
        return None

    def probe_call(self, index: int, function: str, *args: Any) -> Any | None:
        """Call `function(handle, *args)` where failure is an expected answer, not a missing field.

        Used for loops that end at the first error (NVLink links past the last one). A lost
        GPU is still recorded.
        """
        handle = self.handle(index)
        func = getattr(self._backend, function, None) if handle is not None else None
        if func is None:
            return None
        try:
            return self._call(function, handle, *args)
        except Exception as exc:
            self._is_fatal(index, function, exc)
            return None

    def _is_fatal(self, index: int, field: str, exc: Exception) -> bool:
        """Record a lost GPU, a dead library or a hung call; True when that happened."""
        if isinstance(exc, NvmlStuck):
            self._reason = str(exc)
            self._handles.clear()
            return True
        code = getattr(exc, "value", None)
        if isinstance(code, int) and code in GPU_LOST_ERRORS:
            self.lost.setdefault(index, f"{GPU_LOST_ERRORS[code]} while reading {field}")
            self._handles.pop(index, None)
            return True
        if isinstance(code, int) and code in LIBRARY_ERRORS:
            self._reason = LIBRARY_ERRORS[code]
            self._handles.clear()
            return True
        return False

    def _classify(self, index: int, field: str, exc: Exception) -> None:
        """Record a failed read: a lost GPU or dead library as such, anything else as missing.

        Not supported, no permission, not found, function not found, and non-NVML errors such as
        ctypes.ArgumentError (a binding/driver mismatch) all mean the same to the probe: this
        field cannot be read here.
        """
        if not self._is_fatal(index, field, exc):
            self.note_missing(index, field)

    def note_missing(self, index: int, field: str) -> None:
        """Remember that `field` could not be read on GPU `index` (-1: system-wide)."""
        fields = self.missing.setdefault(index, [])
        if field not in fields:
            fields.append(field)

    def constant(self, name: str, default: Any) -> Any:
        """Return a constant from the backend (pynvml's NVML_*), or `default` when it lacks it."""
        value = getattr(self._backend, name, default) if self.start() else default
        # pynvml defines some constants with a stray trailing comma (a tuple): unwrap them.
        if isinstance(value, tuple) and len(value) == 1:
            value = value[0]
        return value

    # --- small public API reused by the validator --------------------------------------
    def current_clocks(self, index: int) -> dict[str, int | None]:
        """Read current SM and memory clocks of GPU `index` in MHz (None when unreadable)."""
        return {
            "sm_mhz": self.query(index, "sm_clock_current", "nvmlDeviceGetClockInfo", CLOCK_SM),
            "memory_mhz": self.query(index, "memory_clock_current", "nvmlDeviceGetClockInfo",
                                     CLOCK_MEM),
        }

    def throttle_reasons(self, index: int) -> list[str] | None:
        """Active clocks-event (throttle) reasons of GPU `index` by name; None when unreadable."""
        mask = self.query_first(index, "throttle_reasons", (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ))
        return None if mask is None else decode_clock_event_reasons(int(mask))

    def gpu_processes(self, index: int) -> list[GpuProcess] | None:
        """Compute and graphics processes on GPU `index` (pid, name, memory); None if unreadable."""
        found: dict[int, GpuProcess] = {}
        readable = False
        for field, function in (("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
                                ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses")):
            procs = self.query(index, field, function)
            if procs is None:
                continue
            readable = True
            for proc in procs:
                pid = int(proc.pid)
                used = getattr(proc, "usedGpuMemory", None)
                # NVML reports "not available" memory as None (pynvml) or as a huge sentinel.
                used_bytes = int(used) if isinstance(used, int) and 0 <= used < 2**63 else None
                if pid not in found:
                    found[pid] = GpuProcess(pid=pid, name=self.process_name(pid),
                                            used_memory_bytes=used_bytes)
        return sorted(found.values(), key=lambda p: p.pid) if readable else None

    def process_name(self, pid: int) -> str | None:
        """Name a GPU process: NVML's name (the driver's PID view), else psutil's."""
        try:
            name = self._call("nvmlSystemGetProcessName", pid) if self.start() else None
        except Exception as exc:  # the name is a nicety; psutil may still know it
            self._is_fatal(-1, "process_name", exc)
            name = None
        if name:
            return str(name).rsplit("/", 1)[-1]
        return process_name(pid)


def process_name(pid: int) -> str | None:
    """Name a process through psutil; None when it cannot be read (another container, gone)."""
    import psutil  # imported on first use only

    try:
        return psutil.Process(pid).name() or None
    except (psutil.Error, OSError, ValueError):
        return None


def init_timeout() -> float:
    """Seconds nvmlInit may take: $HWADVISOR_NVML_TIMEOUT_S when a positive number, else 10."""
    text = os.environ.get(INIT_TIMEOUT_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return INIT_TIMEOUT_S
    return value if 0 < value < 86400 else INIT_TIMEOUT_S


def c_uint(value: int) -> Any:
    """Wrap an NVML enum argument as ctypes.c_uint (pynvml passes Python values untyped)."""
    return ctypes.c_uint(int(value))


_default: Nvml | None = None


def get_nvml() -> Nvml:
    """Return the process-wide NVML helper (created on first use, NVML started lazily)."""
    global _default
    if _default is None:
        _default = Nvml()
    return _default


def current_clocks(index: int) -> dict[str, int | None]:
    """Read current SM and memory clocks (MHz) of GPU `index` through the process-wide helper."""
    return get_nvml().current_clocks(index)


def gpu_processes(index: int) -> list[GpuProcess] | None:
    """List the processes on GPU `index` through the process-wide helper (None if unreadable)."""
    return get_nvml().gpu_processes(index)


def throttle_reasons(index: int) -> list[str] | None:
    """List GPU `index`'s active clock-limit reasons through the process-wide helper."""
    return get_nvml().throttle_reasons(index)


def set_nvml(nvml: Nvml | None) -> None:
    """Replace the process-wide helper (tests inject a FakeNvml); None resets it."""
    global _default
    _default = nvml
