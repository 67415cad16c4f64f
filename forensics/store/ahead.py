"""An input's sha256 computed ahead, by a process of its own, while the command still loads
its modules.

Ingest stores each input's sha256. Hashed by the reader, it costs the reading pipeline
0.55 CPU-s on the 742 MB bench journal, in a process that keeps both cores busy; started
before `forensics ingest` imports its readers (0.3 s on one core, the other idle), most of
it is done before the first byte is parsed. A thread could not do it: it needs the GIL
between chunks, and the imports hold it, so it hashed almost nothing while they ran
(bench/README.md).

A hash ahead is taken for the bytes the reader read only when they are the same: the same
file (device and inode), unchanged from before the hash began to after it ended and after
the reader ended (size and mtime), and the same count of bytes. Otherwise (a log still
growing, a file replaced, the process failed) the reader's bytes are hashed again from its
own descriptor: what the sha256 says never changes, only who computes it. Standard library
only: this module loads before the heavy ones.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys

from ..errors import ForensicsError

CHUNK = 4 << 20

# The hashing process, given the file's descriptor: the file's identity as it began, whether
# the file stayed so to the end, the bytes hashed and their sha256.
_CHILD = """
import hashlib, os, sys
fd, sha, buf, n = int(sys.argv[1]), hashlib.sha256(), bytearray(CHUNK), 0
view, before = memoryview(buf), os.fstat(fd)
while got := os.preadv(fd, [buf], n):
    sha.update(view[:got])
    n += got
after = os.fstat(fd)
same = (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
print(before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, int(same), n,
      sha.hexdigest())
""".replace("CHUNK", str(CHUNK))

# (st_dev, st_ino) -> its hasher; one process ingests one file at a time here (several
# inputs go to worker processes), so no lock
_pending: dict[tuple[int, int], subprocess.Popen] = {}


def hash_ahead(paths: list[str]) -> None:
    """Start hashing `paths` when they are one regular file (several inputs are read by
    worker processes, which would not see it): the reader then counts its bytes only."""
    if len(paths) != 1:
        return
    try:
        if not stat.S_ISREG(os.stat(paths[0]).st_mode):
            return  # a FIFO is read once, by the reader (and opening one would wait)
        fd = os.open(paths[0], os.O_RDONLY)
    except OSError:
        return  # the ingest itself says why it cannot read it
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < CHUNK:
            return  # a small file costs little
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _CHILD, str(fd)], pass_fds=(fd,),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    except OSError:
        return
    finally:
        os.close(fd)
    _pending[(st.st_dev, st.st_ino)] = proc


def claim(st: os.stat_result) -> bool:
    """Whether a hash ahead is running for the file of this `fstat` (the reader then need
    not hash it); `digest_of` must be asked for its result."""
    return (st.st_dev, st.st_ino) in _pending


def digest_of(fd: int, nbytes: int) -> str:
    """sha256 of the first `nbytes` bytes the reader read from `fd`: the hash ahead when it
    hashed those very bytes, else read again from `fd`."""
    st = os.fstat(fd)
    proc = _pending.pop((st.st_dev, st.st_ino), None)
    if proc is not None:
        out, _ = proc.communicate()
        got = out.split()
        if proc.returncode == 0 and len(got) == 7:
            ident, same, n = tuple(int(x) for x in got[:4]), got[4] == b"1", int(got[5])
            now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if same and ident == now and n == nbytes:
                return got[6].decode()
    return _reread(fd, nbytes)


def _reread(fd: int, nbytes: int) -> str:
    sha = hashlib.sha256()
    at = 0
    while at < nbytes:
        data = os.pread(fd, min(CHUNK, nbytes - at), at)
        if not data:
            raise ForensicsError(f"the input shrank while it was read (at byte {at} of {nbytes})")
        sha.update(data)
        at += len(data)
    return sha.hexdigest()
