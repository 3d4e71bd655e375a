"""Run ``gpucluster`` as a real process on a pseudo-terminal of a given width: what a user at a narrow terminal
gets (rich sees a TTY, ``COLUMNS`` is set), with stdout kept apart from stderr."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


def run_tty(*args: str, columns: int = 40, env: dict[str, str] | None = None, timeout: float = 300.0,
            on_tty: str = "stdout") -> Result:
    """``gpucluster ARGS`` with stdout on a pty ``columns`` wide (no newline translation, so what the program
    wrote is what is read back) and stderr in a file; ``on_tty="stderr"``: stderr on the pty, stdout in the
    file (what a user gets from ``gpucluster ... > out.json``)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # keep "\n" as written (a tty would turn it into "\r\n")
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    full_env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color", **(env or {})}
    full_env.pop("NO_COLOR", None)
    with tempfile.TemporaryFile() as err:
        out, errs = (slave, err) if on_tty == "stdout" else (err, slave)
        proc = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=errs, env=full_env, close_fds=True)
        os.close(slave)
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    proc.kill()
                    raise TimeoutError(f"gpucluster {' '.join(args)} ran past {timeout} s")
                ready, _, _ = select.select([master], [], [], min(left, 1.0))
                if not ready:
                    continue
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(master)
        code = proc.wait(timeout=timeout)
        err.seek(0)
        on_pty, in_file = b"".join(chunks).decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
        return Result(code, on_pty, in_file) if on_tty == "stdout" else Result(code, in_file, on_pty)
