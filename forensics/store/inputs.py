"""Paths to byte streams: directories, globs, stdin, compression, and a running sha256."""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import zstandard

from ..errors import ForensicsError
from ..parsers.bounded import MAX_RECORD_BYTES
from ..parsers.otlp import framed_request
from . import ahead

_GLOB_CHARS = set("*?[")
OUT_STEP = 8 << 20  # bytes one decompression step may give out
ZSTD_FEED = 1 << 10  # zstd's bytes fed a step: its frames expand at most ~32,000 times
COMPRESSIONS = {b"\x1f\x8b": "gz", b"\x28\xb5\x2f\xfd": "zst", b"\xfd7zXZ\x00": "xz"}


@dataclass(frozen=True)
class Input:
    name: str  # as shown to the user; "-" is stdin
    path: Path | None  # None for stdin
    found: bool = False  # found in a directory or by a glob, not named: skipped if no log
    skip: str = ""  # found in a folder walk and never read: why (a hidden file, a README)

    @property
    def is_stdin(self) -> bool:
        return self.path is None


def expand(
    paths: list[str], skip: tuple[Path, ...] = (), skip_dirs: tuple[Path, ...] = ()
) -> list[Input]:
    """Every file named by paths, directories searched recursively; errors before any work.
    `skip`: files never read (the database being written, found in a folder ingested);
    `skip_dirs`: folders whose files are never read (the database's shards)."""
    out: list[Input] = []
    for p in paths:
        if p == "-":
            out.append(Input("-", None))
            continue
        path = Path(p)
        if path.is_dir():
            out.extend(_walk(path))
        elif path.is_file():
            out.append(Input(p, path))
        elif _GLOB_CHARS & set(p):
            matches = _glob(p)
            if not matches:
                raise ForensicsError(f"no file matches {p}")
            out.extend(replace(i, found=True) for i in expand(matches))
        elif path.exists():
            out.append(Input(p, path))  # a FIFO or /dev/fd/N: `<(ssh host journalctl …)`
        else:
            raise ForensicsError(f"no such file or directory: {p}")
    seen: set[str] = {str(p.resolve()) for p in skip}
    under = [d.resolve() for d in skip_dirs]
    unique = []
    for inp in out:
        key = str(inp.path.resolve()) if inp.path else "-"
        if inp.path and any(Path(key).is_relative_to(d) for d in under):
            continue
        if key not in seen:
            seen.add(key)
            unique.append(inp)
    return unique


def _glob(pattern: str) -> list[str]:
    """Matches of a glob, `**` included, without following symlinked directories (glob.glob
    follows them: a link to a parent loops until the path is too long)."""
    parts = Path(pattern).parts
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARS & set(part))
    root = Path(*parts[:first]) if first else Path(".")
    rest = "/".join(parts[first:])
    try:
        return sorted(str(m) for m in root.glob(rest))
    except (OSError, ValueError) as exc:
        raise ForensicsError(f"cannot search {pattern}: {exc}") from None


class HashingReader(io.RawIOBase):
    """Reads through to `raw`, hashing every byte (unless a hash ahead does, ahead.py) and
    reporting progress."""

    def __init__(
        self, raw: BinaryIO, progress: Callable[[int], None] | None = None, hashed: bool = False
    ) -> None:
        self.raw = raw
        self.sha = None if hashed else hashlib.sha256()
        self.nbytes = 0
        self.progress = progress

    def hexdigest(self) -> str:
        """sha256 of every byte read."""
        if self.sha is None:
            return ahead.digest_of(self.raw.fileno(), self.nbytes)
        return self.sha.hexdigest()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        n = self.raw.readinto(b)  # type: ignore[attr-defined]
        if n:
            if self.sha is not None:
                self.sha.update(memoryview(b)[:n])
            self.nbytes += n
            if self.progress is not None:
                self.progress(n)
        return n or 0


class _Prefixed(io.RawIOBase):
    """Serves already-read bytes first, then the rest of the stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head = memoryview(head)
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if len(self.head):
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        # Straight into the caller's buffer: read() and a copy cost a 16 MB bytes object
        # (fresh pages) and a memcpy under the GIL per block.
        return self.rest.readinto(b) or 0  # type: ignore[attr-defined]


class _Checked(io.RawIOBase):
    """Turns a decompressor's complaints into one clear error naming the file; an archive
    cut short (a rotated segment still being written) keeps its whole lines: what follows
    the last newline before the cut is held back and said (`cut`, `tail`)."""

    def __init__(self, inner: BinaryIO, name: str, kind: str, members: _Members) -> None:
        self.inner = inner
        self.members = members  # the decompressing reader, which says a cut
        self.name = name
        self.kind = kind
        self.held = bytearray()  # read past the last newline, not yet given out
        self.out = memoryview(b"")  # whole lines ready to give out
        self.cut: str | None = None  # why the archive ended early
        self.tail = b""  # the bytes after the last whole line, where it was cut

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not len(self.out):
            if self.cut is not None or not self._more(len(b)):
                return 0
        n = min(len(b), len(self.out))
        b[:n] = self.out[:n]
        self.out = self.out[n:]
        return n

    def _more(self, size: int) -> bool:
        """Whole lines into `out`; False at the end (the held bytes given out, or kept as
        the tail of a cut archive)."""
        try:
            data = self.inner.read(max(size, 1 << 16))
        except OSError as exc:
            raise ForensicsError(
                f"{self.name}: cannot read its .{self.kind} archive ({exc})"
            ) from None
        if not data:
            if (cut := self.members.cut) is not None:
                self.cut, self.tail = cut, bytes(self.held)
                return False
            self.out, self.held = memoryview(bytes(self.held)), bytearray()
            return bool(len(self.out))
        last = data.rfind(b"\n")
        if last < 0 and len(self.held) + len(data) > MAX_RECORD_BYTES:
            # one line past what a record may hold: given on, for the reader to set aside
            self.out, self.held = memoryview(bytes(self.held) + data), bytearray()
            return True
        if last < 0:
            self.held += data
            return True
        self.held += data[: last + 1]
        self.out, self.held = memoryview(bytes(self.held)), bytearray(data[last + 1 :])
        return True


class _Members(io.RawIOBase):
    """A compressed stream of one or more members (gzip members, xz streams, zstd frames)
    read with the decompressor's own object, which, unlike gzip.GzipFile and zstandard's
    stream_reader, gives out everything before a cut and says there was one (`cut`)."""

    def __init__(self, raw: BinaryIO, name: str, kind: str) -> None:
        self.raw = raw
        self.name = name
        self.kind = kind
        self.obj = self._new()
        self.fed = False  # the current member has been given input
        self.pending = b""
        self.pos = 0
        self.left = b""  # input not yet decompressed
        self.more = False  # the decompressor holds output for the input it was given
        self.cut: str | None = None

    def _new(self):
        if self.kind == "gz":
            return zlib.decompressobj(31)
        if self.kind == "xz":
            return lzma.LZMADecompressor()
        return zstandard.ZstdDecompressor().decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while self.pos >= len(self.pending):
            self.pending, self.pos = b"", 0
            if not self.left and not self.more:
                self.left = self.raw.read(1 << 20)
                if not self.left:
                    if self.fed and not self.obj.eof:
                        self.cut = "it ends inside a compressed member"
                    return 0
            self._step()
        n = min(len(b), len(self.pending) - self.pos)
        b[:n] = memoryview(self.pending)[self.pos : self.pos + n]
        self.pos += n
        return n

    def _step(self) -> None:
        """At most OUT_STEP bytes decompressed from what is left of the input: a bomb (1 GB
        of zeros in 1 MB of gzip) costs a step's memory, never its whole."""
        if not self.fed and not self.left.strip(b"\x00"):
            self.left = b""  # gzip's padding after its last member
            return
        self.fed = True
        try:
            if self.kind == "zst":  # no output bound: fed a little at a time instead
                data, self.left = self.left[:ZSTD_FEED], self.left[ZSTD_FEED:]
                self.pending = self.obj.decompress(data)
            else:
                self.pending = self.obj.decompress(self.left, OUT_STEP)
                if self.kind == "gz":  # the rest of the input given back; output may wait
                    self.left = self.obj.unconsumed_tail
                    self.more = len(self.pending) >= OUT_STEP
                else:  # xz keeps the rest of the input and says whether output waits
                    self.left, self.more = b"", not self.obj.needs_input
        except (zlib.error, lzma.LZMAError, zstandard.ZstdError) as exc:
            raise ForensicsError(f"{self.name}: corrupt .{self.kind} archive ({exc})") from None
        if self.obj.eof:  # the next member follows this one's end
            self.left = self.obj.unused_data + self.left
            self.obj, self.fed, self.more = self._new(), False, False


@dataclass
class Opened:
    stream: BinaryIO  # decompressed, buffered
    head: bytes  # its first bytes, for sniffing
    hasher: HashingReader  # over the raw (compressed) bytes
    compression: str | None
    mtime: float | None
    size: int | None
    nul_head: int = 0  # NUL bytes skipped at the start (a file truncated while written)
    archive: _Checked | None = None  # a compressed input's reader: says where it was cut

    def cut(self) -> tuple[str, bytes] | None:
        """Why a compressed input ended early and the bytes after its last whole line."""
        a = self.archive
        return None if a is None or a.cut is None else (f".{a.kind} archive cut short "
                                                        f"({a.cut})", a.tail)  # fmt: skip


SNIFF_BYTES = 256 << 10
_DUCKDB_MAGIC = b"DUCK"  # at byte 8 of a DuckDB file


# Files a folder walk finds that are surely no log, by their names' ends: said and skipped
# (`ingest --format cat FILE` reads one anyway). A .txt or .out may be a log: not here.
NOT_LOGS = (
    ("a Markdown file", (".md", ".markdown", ".rst")),
    ("Python source", (".py", ".pyc", ".ipynb")),
    ("an image", (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico")),
    ("a PDF document", (".pdf",)),
    ("a configuration file", (".toml", ".yaml", ".yml", ".ini", ".cfg")),
    ("a shell script", (".sh",)),
)


def _walk(root: Path) -> list[Input]:
    """A folder's files in name order; a hidden file or folder (`.git/`) and a file that
    is surely no log by its name are listed as skipped, never read."""
    out = []
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).parts
        hidden = next((i for i, part in enumerate(rel) if part.startswith(".")), None)
        if hidden is not None:
            if hidden == len(rel) - 1:  # the hidden file or folder itself: said once
                what = "a hidden folder" if f.is_dir() else "a hidden file"
                out.append(Input(str(f), f, found=True, skip=what))
            continue
        if not f.is_file():
            continue
        kind = next((k for k, ends in NOT_LOGS if f.name.lower().endswith(ends)), None)
        out.append(Input(str(f), f, found=True, skip=kind or ""))
    return out


def not_a_log(head: bytes) -> str | None:
    """What a file is when it is surely no log (None: read it): an empty file, a DuckDB
    database (this tool's own, in a folder ingested twice), an HTML page (a dashboard)."""
    if not head:
        return "an empty file"
    if head[8:12] == _DUCKDB_MAGIC:
        return "a DuckDB database"
    start = head[:512].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "an HTML page"
    return None


def open_input(inp: Input, progress: Callable[[int], None] | None = None) -> Opened:
    try:
        raw: BinaryIO = sys.stdin.buffer if inp.path is None else open(inp.path, "rb")  # noqa: SIM115
        st = None if inp.path is None else os.fstat(raw.fileno())
    except OSError as exc:
        raise ForensicsError(f"cannot read {inp.name}: {exc.strerror}") from None
    hasher = HashingReader(raw, progress, hashed=st is not None and ahead.claim(st))
    buffered = io.BufferedReader(hasher, buffer_size=1 << 20)
    magic = buffered.peek(8)[:8]
    kind = next((k for m, k in COMPRESSIONS.items() if magic.startswith(m)), None)
    stream: BinaryIO = buffered
    checked = None
    if kind is not None:
        members = _Members(buffered, inp.name, kind)
        stream = io.BufferedReader(members, buffer_size=1 << 20)  # type: ignore[assignment]
        checked = _Checked(stream, inp.name, kind, members)
        stream = io.BufferedReader(checked, buffer_size=1 << 20)  # type: ignore[assignment]
    head = _read_head(stream)
    # an OTLP protobuf file opens with its first request's length: NUL bytes of its own
    head, nul = (head, 0) if framed_request(head) else _past_nuls(head, stream)
    stream = io.BufferedReader(_Prefixed(head, stream), buffer_size=1 << 20)  # type: ignore[assignment]
    return Opened(stream, head, hasher, kind, st.st_mtime if st else None,
                  st.st_size if st else None, nul, checked)  # fmt: skip


def _past_nuls(head: bytes, stream: BinaryIO) -> tuple[bytes, int]:
    """A head of NUL bytes skipped: logrotate's copytruncate leaves one where the writer
    went on at its old offset (a sparse hole), and the log's lines follow it. (the head
    past them, how many were skipped)."""
    if not head.startswith(b"\x00"):
        return head, 0
    skipped = 0
    while head and not head.lstrip(b"\x00"):
        skipped += len(head)
        head = _read_head(stream)
    rest = head.lstrip(b"\x00")
    skipped += len(head) - len(rest)
    if rest and len(rest) < SNIFF_BYTES:
        rest += _read_head_upto(stream, SNIFF_BYTES - len(rest))
    return rest, skipped


def _read_head_upto(stream: BinaryIO, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _read_head(stream: BinaryIO) -> bytes:
    return _read_head_upto(stream, SNIFF_BYTES)
