"""How long the console script takes to start: ``gpucluster --help``, ``--version``, a command name's Tab
completion, one command's ``--help`` (which imports that command's module), and Tab completion of the options
(and some option values) of every command that uses the engine. Prints the median and the best of
N runs each (wall clock and the CPU time the process used, which load changes less), with the load
average; never asserted in tests.

    .venv/bin/python bench/cli_startup.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES: list[tuple[str, list[str], dict[str, str]]] = [
    ("gpucluster --help", ["--help"], {}),
    ("gpucluster --version", ["--version"], {}),
    ("gpucluster version", ["version"], {}),
    ("gpucluster ge<TAB>", [], {"_GPUCLUSTER_COMPLETE": "complete_bash", "COMP_WORDS": "gpucluster ge",
                                "COMP_CWORD": "1"}),
    ("gpucluster get --outp<TAB>", [], {"_GPUCLUSTER_COMPLETE": "complete_bash",
                                        "COMP_WORDS": "gpucluster get --outp", "COMP_CWORD": "2"}),
    ("gpucluster get no<TAB>", [], {"_GPUCLUSTER_COMPLETE": "complete_bash", "COMP_WORDS": "gpucluster get no",
                                    "COMP_CWORD": "2"}),
    ("gpucluster get nodes -o <TAB>", [], {"_GPUCLUSTER_COMPLETE": "complete_bash",
                                           "COMP_WORDS": "gpucluster get nodes -o ''", "COMP_CWORD": "4"}),
    ("gpucluster simulate --help", ["simulate", "--help"], {}),
]


def _option_completion(words: str) -> tuple[str, list[str], dict[str, str]]:
    """Tab completion of the last of ``words`` (after ``gpucluster``), as bash asks for it."""
    line = "gpucluster " + words
    return (f"{line}<TAB>".replace("''", ""), [], {"_GPUCLUSTER_COMPLETE": "complete_bash", "COMP_WORDS": line,
                                                 "COMP_CWORD": str(len(line.split()) - 1)})


# Completing the options of the commands whose modules use the engine (numpy, pydantic, the simulator, the server):
# each imports its command's module to build its parameters (issue 32).
CASES += [_option_completion(words) for words in (
    "schedule --", "schedule --node-policy ''", "demo --", "design --", "whatif --", "simulate --", "up --",
    "up --log-format ''", "submit --", "agent --", "spec show --", "experiment fgd --", "k8s manifests --",
    "monitor fault --", "analyze job --",
)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    script = shutil.which("gpucluster", path=str(Path(sys.executable).parent)) or "gpucluster"
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}, "
          f"{os.cpu_count()} CPUs, {args.runs} runs each")
    for label, argv, env in CASES:
        times, cpu = [], []
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([script, *argv], env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        print(f"{label:<40} wall median {statistics.median(times):.3f} s, best {min(times):.3f} s;"
              f" CPU median {statistics.median(cpu):.3f} s")
    print(f"load average at the end {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")


if __name__ == "__main__":
    main()
