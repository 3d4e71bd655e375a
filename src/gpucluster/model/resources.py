"""Units and names shared by every layer.

Internal units: CPU in millicores, host memory and device memory in MiB, device compute in *core milli*
(1000 = one whole device; HAMi's ``gpucores`` percentage is multiplied by 10 on the way in).
"""

from __future__ import annotations

from typing import Final

CORE_MILLI_PER_DEVICE: Final = 1000
"""Compute capacity of one device in core milli (a whole device)."""

PERCENT_TO_CORE_MILLI: Final = 10
"""HAMi's ``gpucores`` is a percentage of a device; one percent is 10 core milli."""

VENDOR_NVIDIA: Final = "nvidia"
VENDOR_CAMBRICON: Final = "cambricon"
VENDOR_HYGON: Final = "hygon"
KNOWN_VENDORS: Final = (VENDOR_NVIDIA, VENDOR_CAMBRICON, VENDOR_HYGON)
