"""NVML, the real GPUs' driver interface. Every call that fails means "no driver", never a crash."""

from __future__ import annotations


def driver_present() -> bool:
    """True when an NVIDIA driver answers (pynvml initialises and sees at least one GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError, missing libnvidia-ml.so, anything the binding raises
        return False
