"""gpucluster: a GPU-cluster control plane.

Plan a cluster, schedule GPU workloads on it (fractional GPUs, several vendors, topology, gangs, tenants),
watch it, and replay real traces against it. See ``README.md`` and ``docs/``.
"""

__version__ = "0.1.0"
