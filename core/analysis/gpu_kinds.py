"""What kind of GPU work an event is: computation, communication or memory, by HTA's
name rules (shared by the Kineto reader and the GPU analyses)."""

from __future__ import annotations

import enum
import re

_COMM_NAME = re.compile(r"^nccl.*Kernel")  # HTA's is_comm_kernel
_MEMORY_NAME = re.compile(r"^(Memcpy|Memset|dma)")  # HTA's is_memory_kernel


class GpuKind(enum.IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMORY = 2


def kernel_kind(name: str, memory_cat: bool = False) -> GpuKind:
    """The `GpuKind` of one GPU event name (and whether its cat is memcpy/memset)."""
    if memory_cat or _MEMORY_NAME.match(name):
        return GpuKind.MEMORY
    if _COMM_NAME.match(name):
        return GpuKind.COMMUNICATION
    return GpuKind.COMPUTE
