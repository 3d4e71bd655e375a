"""What if: cluster designs simulated on one workload and priced per unit of work (``gpucluster whatif``).

* :mod:`~gpucluster.whatif.evaluate`: a design file -> a :class:`Candidate` (design and simulated cluster),
  :func:`evaluate` (one simulation and its costs), :func:`evaluate_all` (here or on Ray), :func:`verdict`;
* :mod:`~gpucluster.whatif.cost`: what a simulated design's work costs owned, on demand and on spot.

It sits above ``design`` and ``simulator`` (which may not import each other) and below ``cli``.
"""

from gpucluster.whatif.cost import WorkDone, design_costs
from gpucluster.whatif.evaluate import (
    DEFAULT_TOLERANCE_PCT,
    DEFAULT_YEARS,
    FIELDS,
    HOURS_PER_YEAR,
    Candidate,
    DesignInputError,
    evaluate,
    evaluate_all,
    hours,
    load_candidate,
    unique_names,
    verdict,
)

__all__ = [
    "DEFAULT_TOLERANCE_PCT",
    "DEFAULT_YEARS",
    "FIELDS",
    "HOURS_PER_YEAR",
    "Candidate",
    "DesignInputError",
    "WorkDone",
    "design_costs",
    "evaluate",
    "evaluate_all",
    "hours",
    "load_candidate",
    "unique_names",
    "verdict",
]
