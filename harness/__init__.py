"""moe-harness: regression and CI harness for NVFP4 / OCP MX MoE emulation."""

__version__ = "0.1.0"
