"""Ingest: inputs read into staged sources (stage.py), in parallel where there are several,
without holding the catalog; then registered in one transaction (register.py).

All or nothing: an input that fails fails the ingest and nothing is registered; a killed
ingest registers nothing, and what it left in the shard folder is removed by the next.
Readers keep working while inputs are read: the catalog is held only to register.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ForensicsError
from ..parsers.formats import FORMATS
from ..parsers.patterns import PatternError
from ..parsers.patterns import load_file as load_patterns
from .catalog import Catalog, open_catalog
from .database import CommittedInterrupt, Legacy, Locked, db_path, open_writer
from .derived import Deriver, refresh_derived
from .inputs import Input, expand
from .intents import interrupted
from .pairing import current
from .points import ENV as PAUSE_ENV
from .points import reached
from .register import register
from .shards import WRITER, folder, staging
from .stage import Options, SourceResult, Staged, stage
from .summary import Summary, summarize
from .upgrade import upgrade

if TYPE_CHECKING:
    pass

YEARS = (1970, 9999)  # what --year may be: journald's clock starts at the epoch
# Inputs smaller than this in all are read in this process unless `workers` asks: a
# worker process costs its start-up (importing polars, DuckDB and pyarrow: about 0.6 s
# of a core on the 2-core machine), more than reading a few MB.
PARALLEL_MIN_BYTES = 32 << 20

__all__ = ["IngestResult", "RaySettings", "SourceResult", "ingest", "workers_for"]


@dataclass
class IngestResult:
    db: Path
    run: str
    sources: list[SourceResult]
    # seconds: reading the inputs (in parallel), registering them (dedupe included) and
    # storing the answers' rows; the last two hold the catalog
    timings: dict[str, float] = field(default_factory=dict)
    # what the registered sources stored, read on the writer's connection after its commit
    # (a second, read-only connection cost 0.12 s of every ingest); `damage`: the line
    # naming a damaged source beside them (an ingest works beside one), else None
    summary: Summary | None = None
    damage: str | None = None

    @property
    def source_ids(self) -> list[int]:
        return [s.source_id for s in self.sources if s.source_id is not None]

    @property
    def failed(self) -> list[SourceResult]:
        """Inputs that registered nothing because their task failed (--ray)."""
        return [s for s in self.sources if s.status == "failed"]


@dataclass(frozen=True)
class RaySettings:
    """`ingest --ray`: where the cluster is, what a task takes, how long to wait."""

    address: str | None = None  # None: RAY_ADDRESS, else a local Ray started for this
    cpus: float = 1.0
    timeout: float = 600.0  # seconds for every task to be placed and done
    shared: Path | None = None  # a folder every node and the driver reach


ProgressFactory = Callable[[Input, int | None], Callable[[int], None] | None]


def workers_for(n_inputs: int, workers: int | None = None) -> int:
    """Processes that read inputs: one an input, up to the cores this process may use."""
    if workers is not None:
        if workers < 1:
            raise ForensicsError("--workers must be ≥ 1")
        return min(workers, max(n_inputs, 1))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(n_inputs, cores or 1))


def ingest(
    paths: list[str],
    db: str | os.PathLike | None = None,
    *,
    run: str | None = None,
    tags: dict[str, str] | None = None,
    fmt: str | None = None,
    year: int | None = None,
    host: str | None = None,
    host_alias: dict[str, str] | None = None,
    patterns: list[str | os.PathLike] | None = None,
    progress: ProgressFactory | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    workers: int | None = None,
    ray: RaySettings | None = None,
    derivers: Sequence[Deriver] = (),
) -> IngestResult:
    """Read every path into the database; all or nothing.

    `host_alias`: a trace's host → the journal host it is (a span's host is its resource's
    host.name, which need not be the name the journal gives the machine).
    `patterns`: pattern files (TOML) for a fork's own lines, checked before anything is read.
    `wait`: seconds to wait for another writer (an ingest) to finish with the catalog;
    `waiting` is called once when the wait begins. `workers`: processes reading inputs
    (default: one an input, up to the cores). `ray`: `paths` are HOST:PATH inputs, each
    read by a Ray task on that host's node; one that fails registers nothing, the others
    register (IngestResult.failed). `derivers`: the answers stored with the data
    (`forensics.ingest` hands the analyses' own).
    """
    named, run = run is not None, run or "default"
    opts = Options(run=run, named=named, fmt=fmt, year=year, host=host,
                   host_alias=tuple((host_alias or {}).items()),
                   user=_checked(year, fmt, patterns), user_text=_texts(patterns))  # fmt: skip
    path = db_path(db)
    root = folder(path)
    if ray is not None:
        from .remote import parse

        remote = parse(paths)
    else:
        inputs = expand(paths, skip=(path, path.with_name(path.name + ".wal")), skip_dirs=(root,))
    reached("ingest-start")
    # a catalog this version cannot write fails before any input is read; one whose folder
    # says this code wrote it last is not opened twice
    if path.exists() and not (current(path) and interrupted(path) is None):
        _writable(path)
    root_existed = root.exists()
    timings: dict[str, float] = {}
    try:
        with staging(root) as where:
            t0 = time.perf_counter()
            if ray is not None:
                from .remote import stage_on_ray

                staged = stage_on_ray(remote, where, opts, ray.address, ray.cpus, ray.timeout,
                                      ray.shared)  # fmt: skip
            else:
                staged = _staged_or_said(inputs, where, opts, progress, workers, root)
            timings["read_s"] = time.perf_counter() - t0
            run = run if named else _one_run(staged, run)
            return _register(path, staged, run, tags or {}, (wait, waiting), timings, derivers)
    finally:
        if not root_existed:
            _drop_if_unused(root)


def _one_run(staged: list[Staged], run: str) -> str:
    """The run the logs of one ingest go to without --run: the one its results' headers
    name (the logs and their harness results are one incident); where the results name
    several, `run` (default), said once beside the first log."""
    named = list(dict.fromkeys(h for st in staged for h in st.headers))
    if len(named) == 1:
        return named[0]
    logs = [st for st in staged if not st.headers and st.folder is not None]
    if len(named) > 1 and logs:
        logs[0].result.notes.append(
            f"the logs went to run {run}: the results name several runs ({', '.join(named)}); "
            "--run names the logs' run"
        )
    return run


def _drop_if_unused(root: Path) -> None:
    """A shard folder this ingest made that holds nothing but its writer lock: a failed
    first ingest leaves no folder."""
    if root.is_dir() and {p.name for p in root.iterdir()} <= {WRITER}:
        (root / WRITER).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            root.rmdir()


def _checked(year: int | None, fmt: str | None, patterns) -> tuple:
    """The options checked before anything is read; the user's patterns loaded."""
    if year is not None and not YEARS[0] <= year <= YEARS[1]:
        raise ForensicsError(f"--year {year} is outside {YEARS[0]}-{YEARS[1]}")
    if fmt is not None and fmt not in FORMATS:
        raise ForensicsError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    try:
        return tuple(p for f in patterns or [] for p in load_patterns(f))
    except PatternError as exc:
        raise ForensicsError(str(exc)) from None


def _texts(patterns) -> str:
    """The pattern files' text, one after another (a source keeps what it was read with:
    `sources restore` reads its entries with them again)."""
    return "\n".join(Path(f).read_text(encoding="utf-8") for f in patterns or [])


def _writable(path: Path) -> None:
    """A catalog this version can write (an old one upgraded first), or the one-line
    reason; a busy one is waited for at registration, after the inputs are read."""
    with contextlib.suppress(Locked):
        try:
            open_writer(path, views="none")[0].close()
        except Legacy:
            upgrade(path)  # a writing command upgrades by itself, before reading


def _staged_or_said(
    inputs: list[Input],
    where: Path,
    opts: Options,
    progress: ProgressFactory | None,
    workers: int | None,
    root: Path,
) -> list[Staged]:
    """stage_all, with the failures that name no input said in one line: a worker that
    died (killed, out of memory) and a full disk."""
    try:
        return stage_all(inputs, where, opts, progress, workers)
    except BrokenProcessPool:
        names = ", ".join(i.name for i in inputs)
        raise ForensicsError(
            f"a worker reading the inputs died (killed, or out of memory?) while reading "
            f"{names}: nothing was registered; --workers 1 reads them one at a time"
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise ForensicsError(
            f"no space left for the staged shards in {root} ({exc.filename or where}): "
            "nothing was registered; free some, or put the shard folder on another disk "
            "(it may be a link)"
        ) from None


def _register(
    path: Path,
    staged: list[Staged],
    run: str,
    tags: dict[str, str],
    waits: tuple[float, Callable[[], None] | None],
    timings: dict[str, float],
    derivers: Sequence[Deriver],
) -> IngestResult:
    wait, waiting = waits
    with open_catalog(path, wait, waiting, views="tables") as cat:
        con, made = cat.con, cat.made
        reached("catalog-opened")
        moved: list[Path] = []
        try:
            with cat.committing():
                t0 = time.perf_counter()
                results, moved = register(cat, staged, run, tags)
                t1 = time.perf_counter()
                reached("registered")
                refresh_derived(con, derivers)  # the answers over the new data, stored with it
                timings["register_s"], timings["derived_s"] = t1 - t0, time.perf_counter() - t1
        except CommittedInterrupt:
            raise  # committed: the moved folders are the catalog's now
        except BaseException:
            for m in moved:
                shutil.rmtree(m, ignore_errors=True)
            con.close()
            if made:  # only the catalog this ingest made, under the writer lock
                for p in (path, path.with_name(path.name + ".wal")):
                    p.unlink(missing_ok=True)
            raise
        return _result(cat, run, results, timings)


def _result(
    cat: Catalog, run: str, results: list[SourceResult], timings: dict[str, float]
) -> IngestResult:
    """What the commit stored, read on the writer's connection: the summary of the new
    sources and the line naming a damaged source beside them (as checked after the
    moves)."""
    res = IngestResult(cat.path, run, results, timings)
    res.summary = summarize(cat.con, res.source_ids)
    res.damage = cat.damage.line() if cat.damage else None
    return res


def stage_all(
    inputs: list[Input],
    where: Path,
    opts: Options,
    progress: ProgressFactory | None = None,
    workers: int | None = None,
) -> list[Staged]:
    """Every input staged under `where` (a folder each, by input order); several inputs
    in parallel processes. The first failure stops the others and is raised."""
    n = workers_for(len(inputs), workers)
    if workers is None and sum(_size(i) or 0 for i in inputs) < PARALLEL_MIN_BYTES:
        n = 1
    folders = [where / str(i) for i in range(len(inputs))]
    if n <= 1 or len(inputs) <= 1:
        return [
            stage(inp, f, opts, progress(inp, _size(inp)) if progress else None)
            for inp, f in zip(inputs, folders, strict=True)
        ]
    out: dict[int, Staged] = {}
    # Each worker's polars gets its share of the cores: n workers with a thread per core
    # each ran slower than n on their own.
    share = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else os.cpu_count() or 1) // n)  # fmt: skip
    # Read at import, so set before the workers start (the pool starts them on submit).
    saved = os.environ.get("POLARS_MAX_THREADS")
    os.environ.setdefault("POLARS_MAX_THREADS", str(share))
    # Spawned, not forked: the parent's threads (polars', DuckDB's) do not survive a fork,
    # and a fork server that imported the readers first hung its workers.
    with ProcessPoolExecutor(n, mp_context=get_context("spawn"), initializer=_worker,
                             initargs=(os.getpid(),)) as pool:  # fmt: skip
        futures: dict[Future, int] = {}
        for i, (inp, f) in enumerate(zip(inputs, folders, strict=True)):
            if inp.is_stdin:  # this process's own stdin: read here
                out[i] = stage(inp, f, opts, progress(inp, None) if progress else None)
            else:
                futures[pool.submit(stage, inp, f, opts)] = i
        if saved is None:
            os.environ.pop("POLARS_MAX_THREADS", None)
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [fu for fu in done if fu.exception() is not None]
        if failed:
            for fu in futures:
                fu.cancel()
            raise failed[0].exception()  # type: ignore[misc]
        for fu, i in futures.items():
            out[i] = fu.result()
            if progress and (cb := progress(inputs[i], _size(inputs[i]))):
                cb(_size(inputs[i]) or 0)
    return [out[i] for i in range(len(inputs))]


def _worker(parent: int) -> None:
    """A reading worker: gone with its parent (a killed ingest leaves no idle workers),
    and without the parent's descriptors' settings (the fds named there are not its own)."""
    for name in ("FORENSICS_PROGRESS_FD", *PAUSE_ENV):
        os.environ.pop(name, None)
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)


def _size(inp: Input) -> int | None:
    return inp.path.stat().st_size if inp.path else None
