"""Measured kernels: step times from AIConfigurator's tables (the ``kernels`` extra), loaded
lazily where the box is covered; elsewhere the analytic model (docs/speed.md#speed-sources)."""

from cockpit.kernels.measured import MeasuredKernels, measured_kernels

__all__ = ["MeasuredKernels", "measured_kernels"]
