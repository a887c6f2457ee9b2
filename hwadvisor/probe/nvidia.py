"""Placeholder NVIDIA backend (being written)."""

from hwadvisor.probe.base import BackendResult


class NvidiaBackend:
    """NVIDIA GPUs through NVML."""

    name = "nvidia"

    def probe(self) -> BackendResult:
        """Return no devices yet."""
        return BackendResult(notes=["no GPU: the NVIDIA backend is not written yet"])
