"""failfs: a disk that dies on demand, for tests of log-directory failure.

A pass-through FUSE filesystem: MOUNT shows BACKING as it is, until FLAG exists; from then on
every operation under MOUNT fails with EIO (lookups, stat, open, read, write, fsync, rename,
directory fsync ...), descriptors that were open before included, the way a disk that dies
under a running process does (a close then reports EIO too, but the descriptor is released,
so nothing leaks). Removing FLAG brings the disk back.

By hand (it stays in the foreground until unmounted)::

    python tests/support/failfs.py BACKING MOUNT FLAG &
    touch FLAG            # every operation under MOUNT now fails with EIO
    rm FLAG               # the disk answers again
    fusermount -u MOUNT   # or umount MOUNT as root; the process then exits

From a test, ``FailingDisk`` below mounts it in a tmp dir and always unmounts it; the
``failing_disk`` fixture (tests/conftest.py) gives one to any test.

Needs /dev/fuse, Debian's libfuse2 (with fuse3 for ``fusermount``) and the PyPI package fusepy
(pyproject's ``test`` extra). A test is skipped only when FUSE itself is unavailable: no
/dev/fuse, or the kernel refuses the mount. A missing fusepy or libfuse2 is an error to fix.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_MOUNT_REFUSED = 2  # libfuse could not mount (no FUSE here): the tests skip
EXIT_NO_FUSEPY = 3  # fusepy or libfuse2 is not installed: the tests fail
MOUNT_TIMEOUT = 20.0

# Operations that must never fail: closing descriptors, and the daemon's own start and stop.
_ALWAYS_ALLOWED = frozenset({"release", "releasedir", "init", "destroy"})
_STAT_FIELDS = (
    "st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize",
    "st_blocks", "st_atime", "st_mtime", "st_ctime",
)  # fmt: skip
_STATVFS_FIELDS = (
    "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_flag",
    "f_namemax",
)  # fmt: skip


class FailFs:
    """The filesystem: fusepy calls ``fs(operation, *args)``; each operation is the method of that name.

    It needs nothing from fusepy: an ``OSError`` raised here is answered with its errno.
    """

    def __init__(self, backing: str | Path, flag: str | Path) -> None:
        self.backing = os.path.realpath(backing)
        self.flag = os.fspath(flag)

    def __call__(self, operation: str, *args: Any) -> Any:
        if operation not in _ALWAYS_ALLOWED and os.path.lexists(self.flag):
            raise OSError(errno.EIO, f"failfs: {operation} while {self.flag} exists")
        method = getattr(self, operation, None)
        if method is None:  # xattrs, locks, ioctl ...: not supported, as on many filesystems
            raise OSError(errno.ENOSYS, operation)
        return method(*args)

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    # -- the daemon's life ------------------------------------------------------------------------
    def init(self, path: str) -> None:
        return None

    def destroy(self, path: str) -> None:
        return None

    # -- metadata ---------------------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path))
        return {name: getattr(st, name) for name in _STAT_FIELDS}

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {name: getattr(st, name) for name in _STATVFS_FIELDS}

    def access(self, path: str, amode: int) -> None:
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, path)

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._real(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.lchown(self._real(path), uid, gid)

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
        os.utime(self._real(path), times)

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    # -- directories ------------------------------------------------------------------------------
    def opendir(self, path: str) -> int:
        return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        os.fsync(fh)

    def releasedir(self, path: str, fh: int) -> None:
        os.close(fh)

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._real(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))

    def unlink(self, path: str) -> None:
        os.unlink(self._real(path))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._real(old), self._real(new))

    def symlink(self, target: str, source: str) -> None:
        os.symlink(source, self._real(target))  # fusepy's order: the link, then what it points to

    def link(self, target: str, source: str) -> None:
        os.link(self._real(source), self._real(target))

    # -- files ------------------------------------------------------------------------------------
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

    def open(self, path: str, flags: int) -> int:
        return os.open(self._real(path), flags)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._real(path), length)

    def flush(self, path: str, fh: int) -> None:
        return None  # every write already reached the backing file

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        (os.fdatasync if datasync else os.fsync)(fh)

    def release(self, path: str, fh: int) -> None:
        os.close(fh)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 64
    backing, mount_point, flag = argv
    try:
        from fuse import FUSE  # fusepy; loading it also loads libfuse2
    except (ImportError, OSError) as exc:
        print(f"failfs: cannot load fusepy/libfuse2 ({exc}): pip install fusepy, apt-get install libfuse2 fuse3",
              file=sys.stderr)
        return EXIT_NO_FUSEPY
    # No attribute or lookup caching: once the flag exists, even a stat fails at once.
    options = {"fsname": "failfs", "attr_timeout": 0, "entry_timeout": 0, "negative_timeout": 0}
    try:
        FUSE(FailFs(backing, flag), mount_point, foreground=True, nothreads=False, **options)
    except RuntimeError as exc:  # fuse_main failed: libfuse printed why (no /dev/fuse access, not permitted ...)
        print(f"failfs: libfuse could not mount {mount_point}: {exc}", file=sys.stderr)
        return EXIT_MOUNT_REFUSED
    return 0


# ------------------------------------------------------------------------------------ from a test


class FuseUnavailable(Exception):
    """FUSE cannot be used on this machine (no /dev/fuse, or the mount was refused): skip, not fail."""


class FailingDisk:
    """failfs mounted at ``root/disk``, backed by ``root/backing``, failing while ``root/fail-now`` exists.

    ``mount()`` raises ``FuseUnavailable`` where FUSE cannot be used, and an error for anything else
    (fusepy or libfuse2 missing, the daemon crashing). ``close()`` first runs ``before_unmount``
    (stop the broker that uses the disk), then unmounts even after a failure.
    """

    def __init__(self, root: Path) -> None:
        self.backing = root / "backing"
        self.mount_point = root / "disk"
        self.flag = root / "fail-now"
        self.log = root / "failfs.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.before_unmount: list[Callable[[], object]] = []

    def is_mounted(self) -> bool:
        """Whether the mount is up (checked with the flag removed: a failing disk answers stat with EIO)."""
        return os.path.ismount(self.mount_point)

    def mount(self) -> FailingDisk:
        if not os.path.exists("/dev/fuse"):
            raise FuseUnavailable("/dev/fuse does not exist: no FUSE on this machine")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        self.flag.unlink(missing_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, str(self.backing), str(self.mount_point), str(self.flag)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,  # a Ctrl-C on pytest must not take the disk away before the unmount
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not self.is_mounted():
            code = self.proc.poll()
            if code == EXIT_MOUNT_REFUSED:
                raise FuseUnavailable(f"FUSE mount refused: {self._log_tail()}")
            if code is not None:
                raise RuntimeError(f"failfs exited {code} before mounting: {self._log_tail()}")
            if time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(f"failfs did not mount within {MOUNT_TIMEOUT:.0f}s: {self._log_tail()}")
            time.sleep(0.05)
        return self

    def fail(self) -> None:
        """From now on every operation under the mount point answers EIO."""
        self.flag.touch()

    def recover(self) -> None:
        """The disk answers again (what was lost stays lost for whoever noticed)."""
        self.flag.unlink(missing_ok=True)

    def unmount(self) -> None:
        """Unmount (lazily if something still holds files open) and wait for the daemon to exit."""
        self.recover()
        attempts = (
            ["fusermount", "-u"], ["fusermount3", "-u"], ["umount"],
            ["fusermount", "-uz"], ["fusermount3", "-uz"], ["umount", "-l"],
        )  # fmt: skip
        for cmd in attempts:
            if not self.is_mounted():
                break
            if shutil.which(cmd[0]) is not None:
                subprocess.run([*cmd, str(self.mount_point)], capture_output=True, timeout=30)
        if self.proc is not None:
            # Unmounted, the daemon exits by itself; lazily unmounted (files still open) or not at all
            # (no unmount tool), it is asked to stop: libfuse unmounts on its way out.
            for stop, wait in ((None, 5), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                if stop is not None:
                    self.proc.send_signal(stop)
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        assert not self.is_mounted(), f"{self.mount_point} is still mounted: {self._log_tail()}"

    def close(self) -> None:
        for stop in self.before_unmount:
            try:
                stop()
            except Exception as exc:  # teardown goes on to the unmount
                print(f"failing disk teardown: {exc!r}", file=sys.stderr)
        self.unmount()

    def _log_tail(self, chars: int = 1000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:].strip()
        except FileNotFoundError:
            return "(no failfs log)"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
