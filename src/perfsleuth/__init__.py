"""perfsleuth: why is this GPU workload slower than it should be, and how sure are we."""

__version__ = "0.1.0"
