"""One control plane per data directory: an OS file lock on ``DATA_DIR/lock``.

Two processes serving one store would each re-queue the other's jobs on restart and run them twice. The lock
is ``flock(LOCK_EX | LOCK_NB)`` on a file that holds the owner's pid: the kernel drops it when the process dies,
even after ``kill -9``, so a stale lock file never blocks a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "lock"


class DataDirLockedError(RuntimeError):
    """Another process holds the data directory; ``pid`` is the holder (None if it could not be read)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        held = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"{path.parent} is in use by another gpucluster up ({held}); stop it or pick another "
                         "--data-dir")
        self.path = path
        self.pid = pid


class DataDirLock:
    """Held from :meth:`acquire` until :meth:`release` or the process ends."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DataDirLock:
        """Take the lock or raise :class:`DataDirLockedError` naming the holder's pid."""
        if self._fd is not None:
            return self
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirLockedError(self.path, pid) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


__all__ = ["LOCK_NAME", "DataDirLock", "DataDirLockedError"]
