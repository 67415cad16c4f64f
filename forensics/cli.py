"""The `forensics` command: a few lines a command over the Python API."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import duckdb
import orjson
import typer
from rich.table import Table

from . import __version__
from .dashboards import DEFAULT_NAME
from .errors import ForensicsError
from .escaping import SafeConsole, visible
from .named import list_queries, view_sql
from .outputs import json_safe
from .parsers.formats import FORMATS as INPUT_FORMATS
from .plural import counted
from .sql import OUTPUT_FORMATS, TABLE_ROWS, export, preview
from .statuses import BAD_VERDICTS
from .store import db_path
from .store import upgrade as upgrade_db
from .store.database import LEGACY_VERSION
from .timefmt import iso_us, span

if TYPE_CHECKING:
    from rich.progress import Progress

    from .store.ingest import IngestResult

# The readers (pyarrow, polars), the dashboard's figures (plotly), the demo and the
# reproducer load inside the commands that use them: imported here, every command paid
# for all of them at start-up (1.1 s, more than most queries take).
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Post-mortem forensics for PD-disaggregated LLM inference logs (journald → DuckDB).",
)
out = SafeConsole()
if not out.is_terminal:  # piped output: COLUMNS where set, else wide (a table never cut)
    _cols = os.environ.get("COLUMNS", "")
    out = SafeConsole(width=int(_cols) if _cols.isdigit() and int(_cols) > 0 else 160)
err = SafeConsole(stderr=True)

DbOpt = Annotated[
    Path | None,
    typer.Option("--db", envvar="FORENSICS_DB", help="DuckDB file [default: ./forensics.duckdb]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
RunOpt = Annotated[str | None, typer.Option("--run", help="Only this run [default: all runs].")]
SinceOpt = Annotated[
    str | None,
    typer.Option(help="Only what happened from this time on (ISO 8601, UTC without a zone; or "
                 "epoch seconds)."),
]  # fmt: skip
UntilOpt = Annotated[str | None, typer.Option(help="Only what happened before this time.")]
WaitOpt = Annotated[
    float,
    typer.Option(help="Seconds to wait while another process (a writer, or a reader while it "
                 "opens the catalog) holds the database."),
]  # fmt: skip
ScrubOpt = Annotated[
    bool,
    typer.Option("--scrub", help="Secrets (URL passwords, tokens, keys) out of every value shown."),
]
PROGRESS_MIN_BYTES = 4 << 20


def _progress_factory(progress: Progress):
    def make(inp, size):
        if size is None or size < PROGRESS_MIN_BYTES:
            return None
        task = progress.add_task(visible(inp.name), total=size)
        return lambda n: progress.advance(task, n)

    return make


def _ingest_progress() -> Progress | None:
    """Ingest's progress bars on a terminal (rich.progress imported only here)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    # No Progress at all off a terminal: some rich versions print a blank line on exit.
    return (
        Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err,
            transient=True,
        )
        if err.is_terminal
        else None
    )


def _waiting(wait: float):
    """What a writer says once when it has to wait for the catalog."""
    return lambda: err.print(
        f"waiting up to {wait:g} s for another process (a writer, or a "
        "reader opening the catalog) to let go of the database …"
    )


def _tags(values: list[str]) -> dict[str, str]:
    return _pairs(values, "--tag", "KEY=VALUE", empty_value=True)


def _pairs(values: list[str], option: str, form: str, empty_value: bool = False) -> dict[str, str]:
    out = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k or not (val or empty_value):
            raise ForensicsError(f"{option} takes {form}, got {v!r}")
        out[k] = val
    return out


@app.command()
def ingest(
    paths: Annotated[list[str], typer.Argument(help="Files, directories, globs, or - for stdin.")],
    db: DbOpt = None,
    run: Annotated[
        str | None,
        typer.Option(
            help="Run name, for A/B comparisons; wins over a results file's run headers "
            "(several: their common stem) [default: the headers' names, else default]."
        ),
    ] = None,
    tag: Annotated[list[str], typer.Option(help="KEY=VALUE label of the run (repeatable).")] = [],  # noqa: B006
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="Skip sniffing: " + ", ".join(INPUT_FORMATS) + " (docs/details.md).",
        ),
    ] = None,
    year: Annotated[
        int | None, typer.Option(help="Year for renderings without one (short, short-precise).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Host for renderings without one (cat).")] = None,
    host_alias: Annotated[
        list[str],
        typer.Option(help="TRACE=JOURNAL: a trace's host is that journal host (repeatable)."),
    ] = [],  # noqa: B006
    patterns: Annotated[
        list[Path],
        typer.Option("--patterns", help="Pattern file (TOML) for a fork's own lines (repeatable)."),
    ] = [],  # noqa: B006
    wait: WaitOpt = 60.0,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes reading inputs [default: one an input, up to the cores]."),
    ] = None,
    ray: Annotated[
        bool, typer.Option("--ray", help="Inputs are HOST:PATH, each read by a Ray task on HOST.")
    ] = False,
    ray_address: Annotated[
        str | None, typer.Option(help="The Ray cluster [default: RAY_ADDRESS, else a local one].")
    ] = None,
    ray_cpus: Annotated[float, typer.Option(help="CPUs a Ray task takes.")] = 1.0,
    ray_timeout: Annotated[
        float, typer.Option(help="Seconds every Ray task has to be placed and done.")
    ] = 600.0,
    ray_shared: Annotated[
        Path | None,
        typer.Option(help="A folder every node and this host reach [default: Ray's object store]."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Read logs and harness results into the database: journald, plain, docker, results.

    Inputs, sniffed (--format forces one): journalctl in every rendering (short, short-iso,
    short-iso-precise, short-precise, short-full, short-unix, short-monotonic, with-unit,
    cat, json, json-seq, export) and binary .journal files (journal); SGLang's stdout
    saved to a file (sglang); docker logs / kubectl logs --timestamps (timestamped);
    docker's json-file logs (docker-json); SGLang's --export-metrics-to-file records
    (sglang-metrics); Dynamo's JSONL logs (dynamo-jsonl); harness results (JSON lines,
    CSV). Files or folders
    (searched recursively), globs, FIFOs, - for stdin; .gz, .zst and .xz opened as they are.

    Example: forensics ingest prefill/ decode.log.zst --run flag-on --tag overlap=1

    Example: forensics ingest --ray decode-0:/var/log/decode.export prefill-0:/var/log/p.export
    """
    if not ray:
        from .store.ahead import hash_ahead

        hash_ahead(paths)  # while the readers load
    from .store.ingest import RaySettings
    from .writing import ingest as run_ingest

    progress = _ingest_progress()
    with progress or contextlib.nullcontext():
        res = run_ingest(
            paths, db, run=run, tags=_tags(tag), fmt=format, year=year, host=host,
            host_alias=_pairs(host_alias, "--host-alias", "TRACE=JOURNAL"),
            patterns=patterns, progress=_progress_factory(progress) if progress else None,
            wait=wait, waiting=_waiting(wait),
            workers=workers,
            ray=RaySettings(ray_address, ray_cpus, ray_timeout, ray_shared) if ray else None,
        )  # fmt: skip
    _print_ingest(res, json)
    if res.failed:
        for s in res.failed:
            sys.stderr.write(f"error: {s.name} registered nothing: {s.reason}\n")
        raise typer.Exit(1)


def _print_ingest(res: IngestResult, as_json: bool, more: dict | None = None) -> None:
    if res.damage:  # an ingest works beside a damaged source, and says so
        err.print(f"note: {res.damage}")
    summ = res.summary
    assert summ is not None  # every ingest reads it after its commit
    if as_json:
        doc = {
            "db": str(res.db),
            "run": res.run,
            "sources": [s.__dict__ for s in res.sources],
            "timings": res.timings,
            "summary": summ.as_dict(),
            **(more or {}),
        }
        _write_json(doc)
        return
    for s in res.sources:
        if s.status in ("skipped", "failed"):
            out.print(f"{s.status} {s.name}: {s.reason}", markup=False)
            continue
        extra = []
        if s.duplicates:
            extra.append(f"{counted(s.duplicates, 'duplicate')} dropped")
        if s.rejoined:
            extra.append(f"{s.rejoined:,} line-max splits rejoined")
        if s.quarantined:
            extra.append(f"{counted(s.quarantined, 'line')} quarantined")
        tail = f" ({'; '.join(extra)})" if extra else ""
        what = (
            counted(s.records.get("result", 0), "result")
            if s.format.startswith("results")
            else counted(s.entries, "entry", "entries")
            + "".join(f", {counted(n, k + ' record')}" for k, n in s.records.items() if n)
        )
        out.print(f"{s.name}: {s.format}, {what}{tail}")
        for note in s.notes:
            out.print(f"  note: {note}")
    if not any(s.status == "ingested" for s in res.sources):
        return  # nothing new: no table of what is already there
    t = Table(title=f"run {res.run!r} → {res.db}", title_justify="left")
    for c in ("host", "unit", "entries", "first", "last"):
        t.add_column(c, justify="right" if c == "entries" else "left")
    for h, u, n, a, b in summ.per_stream:
        t.add_row(h or "-", u or "-", f"{n:,}", iso_us(a), iso_us(b))
    out.print(t)
    _print_totals(summ)


def _print_totals(summ) -> None:
    out.print(f"time span: {span(summ.first_ts_us, summ.last_ts_us)}")
    if summ.trace_hosts:
        out.print(f"trace hosts no journal names: {', '.join(summ.trace_hosts)} "
                  "(--host-alias TRACE=JOURNAL maps one)", markup=False)  # fmt: skip
    out.print(f"quarantined lines: {summ.quarantined:,}")
    for reason, n in summ.quarantine:
        out.print(f"  {n:,} × {reason}")


sources_app = typer.Typer(rich_markup_mode=None)  # its help: the callback's docstring
app.add_typer(sources_app, name="sources")


@sources_app.callback(invoke_without_command=True)
def sources(ctx: typer.Context, db: DbOpt = None, json: JsonOpt = False) -> None:
    """List ingested sources: path, format, sha256, entries, quarantined lines, run;
    remove one, or relabel its host or run.

    Example: forensics sources --json; forensics sources relabel 3 --host decode-1
    """
    if ctx.invoked_subcommand:
        return
    from .store.sources import list_sources  # the ingest path's imports: not at start-up

    rows = list_sources(db)
    if json:
        _write_json(rows)
        return
    t = Table()
    for c in ("id", "run", "path", "format", "entries", "dups", "quarantined", "sha256"):
        t.add_column(c)
    damaged = [r for r in rows if r["damaged"]]
    if damaged:
        t.add_column("damaged", style="red")
    for r in rows:
        t.add_row(
            str(r["source_id"]), r["run"], r["path"], r["format"], f"{r['entries']:,}",
            f"{r['duplicates']:,}", f"{r['quarantined']:,}", r["sha256"][:12],
            *([r["damaged"] or ""] if damaged else []),
        )  # fmt: skip
    out.print(t)
    for r in damaged[:1]:
        sid = r["source_id"]
        out.print(f"source {sid} is damaged: `forensics sources remove {sid}` removes it, then "
                  f"`forensics ingest {r['path']}` reads it again")  # fmt: skip


@sources_app.command("remove")
def sources_remove(
    source_id: Annotated[int, typer.Argument(help="The source's id (forensics sources).")],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Remove every row of one source (refused, with why, when that could lose entries).

    Example: forensics sources remove 3
    """
    from .writing import remove_source

    res = remove_source(db, source_id, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"removed source {source_id} ({res['path']}): " + ", ".join(
        f"{n:,} {t}" for t, n in res["removed"].items()))  # fmt: skip


@sources_app.command("relabel")
def sources_relabel(
    source_id: Annotated[int, typer.Argument(help="The source's id (forensics sources).")],
    host: Annotated[str | None, typer.Option(help="Its host, for entries and records.")] = None,
    run: Annotated[str | None, typer.Option(help="Its run.")] = None,
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Give one source's rows another host or run (an ingest with the wrong --host).

    Example: forensics sources relabel 3 --host decode-1
    """
    from .writing import relabel_source

    res = relabel_source(db, source_id, host=host, run=run, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"relabelled source {source_id} ({res['path']}): " + ", ".join(
        f"{n:,} {c}" for c, n in res["changed"].items()))  # fmt: skip


@sources_app.command("dedupe")
def sources_dedupe(
    source_id: Annotated[int, typer.Argument(help="The source whose copies go.")],
    against: Annotated[int, typer.Option(help="The source that keeps them.")],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Set aside one source's entries that another holds, aligned in order as ingest
    aligns renderings but without its 99 % share test (`cat`: by message alone). Ingest
    prints this command where a pair repeats much of each other; `sources restore` undoes it.

    Example: forensics sources dedupe 3 --against 1
    """
    from .writing import dedupe_source

    res = dedupe_source(db, source_id, against, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"source {source_id}: {res['dropped']:,} entries set aside as source "
          f"{against}'s; `forensics sources restore {source_id}` puts them back")  # fmt: skip


@sources_app.command("restore")
def sources_restore(
    source_id: Annotated[int, typer.Argument(help="The source's id (forensics sources).")],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Put back every entry dedupe set aside in one source (the undo of a merge).

    Example: forensics sources restore 2
    """
    from .writing import restore_source

    res = restore_source(db, source_id, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"source {source_id}: {res['restored']:,} entries put back")


runs_app = typer.Typer(rich_markup_mode=None)  # its help: the callback's docstring
app.add_typer(runs_app, name="runs")


@runs_app.callback(invoke_without_command=True)
def runs(ctx: typer.Context, db: DbOpt = None, json: JsonOpt = False) -> None:
    """List the runs: tags, sources, judged and corrupted requests; rename or merge one.

    Example: forensics runs; forensics runs rename default incident
    """
    if ctx.invoked_subcommand:
        return
    from .analyses.runs import list_runs

    rows = list_runs(db)
    if json:
        _write_json(rows)
        return
    t = Table()
    for c in ("run", "created", "sources", "judged", "corrupted", "tags"):
        t.add_column(c, overflow="fold")
    for r in rows:
        tags = ", ".join(f"{k}={v}" for k, v in r["tags"].items())
        t.add_row(r["run"], r["created"], str(r["sources"]), f"{r['judged']:,}",
                  f"{r['corrupted']:,}", tags)  # fmt: skip
    out.print(t)


@runs_app.command("rename")
def runs_rename(
    old: Annotated[str, typer.Argument(help="The run's name now.")],
    new: Annotated[str, typer.Argument(help="Its new name (not taken).")],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Give a run another name: every row of it, in every source, tags kept.

    Example: forensics runs rename default incident
    """
    from .writing import rename_run

    res = rename_run(db, old, new, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"renamed run {old} to {new}: " + _changes(res["changed"]))


@runs_app.command("merge")
def runs_merge(
    run: Annotated[str, typer.Argument(help="The run whose rows move.")],
    into: Annotated[str, typer.Argument(help="The run they join (made when new).")],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
    json: JsonOpt = False,
) -> None:
    """Put one run's rows into another (both runs' tags kept, the second's winning).

    Example: forensics runs merge repro-part2 repro
    """
    from .writing import rename_run

    res = rename_run(db, run, into, merge=True, wait=wait, waiting=_waiting(wait))
    _done(res, json, f"merged run {run} into {into}: " + _changes(res["changed"]))


def _changes(changed: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {c}" for c, n in changed.items()) or "no rows"


def _done(res: dict, as_json: bool, text: str) -> None:
    if as_json:
        _write_json(res)
    else:
        out.print(text)


LimitOpt = Annotated[
    int | None,
    typer.Option(help=f"Rows to show or write [default: {TABLE_ROWS} in a table, all otherwise]."),
]


@app.command()
def sql(
    statement: Annotated[str, typer.Argument(help="One SQL statement (read-only).")],
    db: DbOpt = None,
    format: Annotated[
        str, typer.Option("--format", help=f"One of {', '.join(OUTPUT_FORMATS)}.")
    ] = "table",
    out_file: Annotated[Path | None, typer.Option("--out", help="Write to this file.")] = None,
    limit: LimitOpt = None,
) -> None:
    """Run SQL over the database on a read-only connection.

    Example: forensics sql "SELECT host, count(*) FROM entries GROUP BY host" --format csv
    """
    if format != "table":
        text = export(statement, format, out_file, db, limit)
        if text is not None:
            text = text if text.endswith("\n") else text + "\n"
            # a terminal gets controls escaped; a pipe or a file the bytes as stored
            sys.stdout.write(visible(text) if sys.stdout.isatty() else text)
        else:
            err.print(f"wrote {out_file}")
        return
    shown = TABLE_ROWS if limit is None else limit
    cols, rows, total = preview(statement, db, shown)
    from . import terminal

    out.print(terminal.result_table(cols, rows))
    if total > len(rows):
        out.print(
            f"… {total - len(rows):,} more rows ({total:,} in all): --format csv (or json, or "
            f"parquet --out FILE) for all of them, --limit N for more here"
        )


@app.command(name="query")
def query_cmd(
    name: Annotated[str | None, typer.Argument(help="A named query (see --list).")] = None,
    db: DbOpt = None,
    list_: Annotated[bool, typer.Option("--list", help="List the named queries.")] = False,
    format: Annotated[
        str, typer.Option("--format", help=f"One of {', '.join(OUTPUT_FORMATS)}.")
    ] = "table",
    out_file: Annotated[Path | None, typer.Option("--out", help="Write to this file.")] = None,
    limit: LimitOpt = None,
) -> None:
    """Run a named query (one documented .sql file in queries/), or list them.

    Example: forensics query rooms --format csv
    """
    if list_ or name is None:
        t = Table()
        for c in ("name", "what one row is", "columns"):
            t.add_column(c, overflow="fold")
        for q in list_queries():
            t.add_row(q.name, q.summary, ", ".join(c[0] for c in q.columns))
        out.print(t)
        return
    sql(view_sql(name), db=db, format=format, out_file=out_file, limit=limit)


def _scope(db, run=None, since: str | None = None, until: str | None = None):
    """The command's one read scope: its connection, checked runs and --since/--until
    window (forensics/scope.py); closed when the command's block ends."""
    from .scope import open_scope

    return open_scope(db, run or None, since, until)


def _write_json(doc) -> None:
    """A command's --json: room ids and other integers past 2^53 as strings; C1 and bidi
    characters as JSON escapes (orjson escapes C0 itself), the same values either way."""
    text = orjson.dumps(json_safe(doc), default=str, option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write(visible(text) + "\n")


def _emit(result, as_json: bool, show) -> None:
    if as_json:
        _write_json(result.as_dict())
    else:
        show(out, result)


@app.command()
def rooms(
    db: DbOpt = None,
    run: RunOpt = None,
    verdict: Annotated[str | None, typer.Option(help="List only rooms with this verdict.")] = None,
    limit: Annotated[int, typer.Option(help="Rooms to list.")] = 20,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Verdict counts per run and the worst rooms (conflict, mismatch, stale, partial, …).

    Example: forensics rooms --verdict stale
    """
    from . import terminal
    from .analyses.rooms import rooms as run_rooms

    with _scope(db, run, since, until) as s:
        _emit(run_rooms(s, None, verdict, limit), json, terminal.rooms)


@app.command()
def correlate(
    db: DbOpt = None,
    run: RunOpt = None,
    bad: Annotated[
        str, typer.Option(help="Verdicts that make a room bad, comma-separated.")
    ] = ",".join(BAD_VERDICTS),
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Do bad rooms / unexpected page writes explain the corrupted requests? Fisher, RR.

    Example: forensics correlate --run flag-on --bad partial,mismatch,stale,conflict
    """
    verdicts = tuple(v.strip() for v in bad.split(",") if v.strip())
    from . import terminal
    from .analyses.correlate import correlate as run_correlate

    with _scope(db, run, since, until) as s:
        _emit(run_correlate(s, None, verdicts), json, terminal.correlation)


@app.command()
def suspects(
    db: DbOpt = None,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Only these runs (repeatable) [default: all].")
    ] = None,
    fdr: Annotated[float, typer.Option(help="False discovery rate a suspect must pass.")] = 0.05,
    min_support: Annotated[
        int, typer.Option(help="Requests a predicate must hold for to be tested.")
    ] = 5,
    dependent: Annotated[
        bool, typer.Option(help="Benjamini–Yekutieli (any dependence) instead of –Hochberg.")
    ] = False,
    top: Annotated[int, typer.Option(help="Lines of the ranking to show.")] = 15,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Write the verdict's next experiment as an `experiment ab` "
            "plan (no known cause: the KV checksums' and the model's baseline).",
        ),
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Every recorded factor ranked by its association with corruption: Fisher, exact
    intervals, FDR, load strata, known causes and the next experiment.

    Example: forensics suspects --run incident --plan next.toml
    """
    from . import terminal
    from .analyses.report import report as run_report
    from .analyses.suspects import suspects as run_suspects
    from .analyses.verdict import plan as verdict_plan

    with _scope(db, run, since, until) as s:
        res = run_suspects(s, None, fdr, min_support, dependent)
        _emit(res, json, lambda con, r: terminal.suspects(con, r, top))
        if plan is not None:
            text, why = verdict_plan(run_report(s).verdict, next(iter(s.tags.values()), {}))
    if plan is not None:
        try:
            plan.write_text(text, encoding="utf-8")
        except OSError as exc:
            _fail(f"--plan {plan}: {exc.strerror}")
        if not json:
            sys.stderr.write(f"plan written to {visible(str(plan))} ({visible(why)}): "
                             f"forensics experiment ab {visible(str(plan))}\n")  # fmt: skip


experiment_app = typer.Typer(rich_markup_mode=None)  # its help: the callback's docstring
app.add_typer(experiment_app, name="experiment")
PlanArg = Annotated[Path, typer.Argument(help="The plan (TOML; docs/investigations.md).")]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Folder for the blocks' results and server output "
                 "[default: experiments/<plan>-<UTC start>]."),
]  # fmt: skip
DryOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the schedule and its worst case; run nothing.")
]


@experiment_app.callback()
def experiment() -> None:
    """Run the experiment that ends an investigation, stopped by a sequential test.

    Exit codes: ab 0 equivalent, 1 differs, 125 undecided; check 0 good, 1 bad, 125
    undecided or untestable (git bisect run's); minimize 0 found, 125 not; a plan,
    database or reproducer error 128; Ctrl-C 130.

    Example: forensics experiment ab overlap.toml --db incident.duckdb
    """


ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the experiment in --out.")]


def _experiment(verb: str, plan: Path, db: Path | None, out_dir: Path | None, dry_run: bool,
                json: bool, resume: bool = False) -> None:  # fmt: skip
    import forensics.experiment as ex

    from .scrubbing import scrub

    try:
        if resume and out_dir is None:
            raise ForensicsError("--resume needs --out: the experiment's folder")
        res = getattr(ex, verb)(plan, db, out_dir, dry_run, resume)
    except ForensicsError as exc:
        res = ex.ExperimentResult(verb, decision="error", error=str(exc))
    except Exception as exc:  # MemoryError too: an experiment's exits are few
        # git bisect run reads 1 as "bad" and 125 as "skip": anything unforeseen is 128
        # (abort), never 1, and one line
        first = (str(exc).splitlines() or [""])[0]
        res = ex.ExperimentResult(verb, decision="error",
                                  error=f"unexpected {type(exc).__name__}: {first}")  # fmt: skip
    if res.error:  # a URL's user-info or a token in a plan, a path, a server's answer
        res.error = scrub(res.error)
    if json:
        _write_json(res.as_dict())
    else:
        from . import terminal

        terminal.experiment(out, res)
    if res.error and not json:
        sys.stderr.write("error: " + visible(" ".join(res.error.split())) + "\n")
    raise typer.Exit(res.exit_code)


@experiment_app.command("ab")
def experiment_ab(plan: PlanArg, db: DbOpt = None, out_dir: OutOpt = None,
                  dry_run: DryOpt = False, json: JsonOpt = False,
                  resume: ResumeOpt = False) -> None:  # fmt: skip
    """Two arms in interleaved ABBA blocks until the rates differ or are equivalent.

    Example: forensics experiment ab overlap.toml --db incident.duckdb
    """
    _experiment("ab", plan, db, out_dir, dry_run, json, resume)


@experiment_app.command("check")
def experiment_check(plan: PlanArg, db: DbOpt = None, out_dir: OutOpt = None,
                     dry_run: DryOpt = False, json: JsonOpt = False,
                     resume: ResumeOpt = False) -> None:  # fmt: skip
    """Is this configuration bad? Wald's SPRT between good_rate and bad_rate.

    Example: git bisect run forensics experiment check bisect.toml
    """
    _experiment("check", plan, db, out_dir, dry_run, json, resume)


@experiment_app.command("minimize")
def experiment_minimize(plan: PlanArg, db: DbOpt = None, out_dir: OutOpt = None,
                        dry_run: DryOpt = False, json: JsonOpt = False,
                        resume: ResumeOpt = False) -> None:  # fmt: skip
    """The smallest subset of a failing configuration's flags that still fails (ddmin).

    Example: forensics experiment minimize flags.toml
    """
    _experiment("minimize", plan, db, out_dir, dry_run, json, resume)


@app.command()
def compare(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Runs to compare [default: all].")
    ] = None,
    db: DbOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Corruption rate per run (Wilson 95 %) and Fisher's p for each pair: noise or not?

    Example: forensics compare flag-on flag-off
    """
    from . import terminal
    from .analyses.compare import compare as run_compare

    with _scope(db, runs, since, until) as s:
        _emit(run_compare(s), json, terminal.comparison)


@app.command()
def skew(
    db: DbOpt = None,
    run: RunOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Bounds on the clock offset between prefill and decode hosts, from causality.

    Example: forensics skew --json
    """
    from . import terminal
    from .analyses.skew import skew as run_skew

    with _scope(db, run, since, until) as s:
        _emit(run_skew(s), json, terminal.skew)


@app.command()
def templates(
    db: DbOpt = None,
    run: RunOpt = None,
    new_since: Annotated[
        str | None,
        typer.Option(help="A run, or a time: only templates new or more frequent since then."),
    ] = None,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option(help="Two runs: templates new or more frequent in the second."),
    ] = None,
    as_pattern: Annotated[
        str | None, typer.Option(help="A template id: print a TOML pattern stub for its lines.")
    ] = None,
    show: Annotated[
        str | None,
        typer.Option(help="A template id: its named values, distinct counts and the top ten."),
    ] = None,
    limit: Annotated[int, typer.Option(help="Templates to list.")] = 50,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """What every line says, as templates (variable parts masked), with counts per host;
    or those new since a run or a time (Elastic's "new patterns", with statistics).

    Example: forensics templates --new-since baseline-run
    """
    from . import terminal
    from .analyses.templates import as_pattern as stub
    from .analyses.templates import show as show_template
    from .analyses.templates import templates as run_templates

    with _scope(db, run, since, until) as s:
        if as_pattern is not None:
            sys.stdout.write(visible(stub(s, _template_id(as_pattern))))
            return
        if show is not None:
            _emit(show_template(s, _template_id(show)), json, terminal.template_values)
            return
        _emit(run_templates(s, None, new_since, compare, limit), json, terminal.templates)


def _template_id(text: str) -> int:
    """A template id as listed (16 hex digits) or as in --json (decimal)."""
    try:
        return int(text, 16) if len(text) == 16 else int(text)
    except ValueError:
        raise ForensicsError(f"not a template id: {text!r}") from None


@app.command()
def follow(
    key: Annotated[
        str | None, typer.Argument(help="A request id (rid) or a bootstrap_room.")
    ] = None,
    template: Annotated[
        str | None, typer.Option(help="A template id (`forensics templates`): its lines instead.")
    ] = None,
    db: DbOpt = None,
    run: RunOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="Every step record, not folded.")] = False,
    around: Annotated[
        float | None,
        typer.Option(help="Add the other events on the same hosts within SECONDS."),
    ] = None,
    cascade: Annotated[
        bool, typer.Option(help="The first failure (report's) and the failures that echo it.")
    ] = False,
    json: JsonOpt = False,
) -> None:
    """The room's verdict or the request's status, then every line about it on every
    host in time order (skew applied).

    Example: forensics follow 7301934425522180813 --around 2
    """
    from . import terminal
    from .analyses.follow import follow as run_follow
    from .analyses.follow import follow_cascade, follow_template

    if sum((key is not None, template is not None, cascade)) != 1:
        raise ForensicsError(
            "follow takes a rid or a room, --template ID or --cascade: one of them"
        )
    with _scope(db, run) as s:
        if cascade:
            found = follow_cascade(s, None, around)
        elif template is not None:
            found = follow_template(s, _template_id(template), None, around)
        else:
            found = run_follow(s, key or "", None, all_, around)
        _emit(found, json, terminal.follow)


@app.command()
def canary(
    db: DbOpt = None,
    run: RunOpt = None,
    top: Annotated[int, typer.Option(help="Steps to list.")] = 10,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """Decode steps with page writes outside the expected set: layers, pages, batch.

    Example: forensics canary --top 5
    """
    from . import terminal
    from .analyses.canary import canary as run_canary

    with _scope(db, run, since, until) as s:
        _emit(run_canary(s, None, top), json, terminal.canary)


@app.command()
def report(
    db: DbOpt = None,
    run: RunOpt = None,
    top: Annotated[int, typer.Option(help="Rooms and canary steps to list.")] = 5,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """The whole story: coverage, verdicts, correlations, runs, canary, skew — in sentences.

    Example: forensics report --run flag-on
    """
    from . import terminal
    from .analyses.report import report as run_report

    with _scope(db, run, since, until) as s:
        _emit(run_report(s, None, top), json, terminal.report)


@app.command()
def dashboard(
    db: DbOpt = None,
    run: Annotated[list[str], typer.Option(help="A run to show (repeatable) [default: all].")] = [],  # noqa: B006
    out_file: Annotated[
        Path | None, typer.Option("--out", help=f"HTML file to write [default: ./{DEFAULT_NAME}].")
    ] = None,
    open_: Annotated[bool, typer.Option("--open", help="Open it in a browser.")] = False,
    scrub: ScrubOpt = False,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """One offline HTML file: page writes, requests, page map, verdicts, runs, worst rooms.

    Example: forensics dashboard --run flag-on --out incident.html --open
    """
    from .dashboards.write import dashboard as run_dashboard

    with _scope(db, run, since, until) as s:
        res = run_dashboard(s, None, out_file, open_, scrub)
    if json:
        _write_json(res.as_dict())
        return
    _print_dashboard(res)


def _print_dashboard(res) -> None:
    out.print(f"wrote {res.path} ({res.bytes / 1e6:.1f} MB, {res.seconds:.1f} s)")
    for line in res.empty + res.notes:
        out.print(f"  {line}")


@app.command()
def trace(
    db: DbOpt = None,
    run: Annotated[list[str], typer.Option(help="A run to draw (repeatable) [default: all].")] = [],  # noqa: B006
    out_file: Annotated[
        Path, typer.Option("--out", help="Trace file; .tar or .zip with --profile.")
    ] = Path("incident.pftrace"),
    format: Annotated[
        str, typer.Option("--format", help="proto (Perfetto TrackEvent) or json (Chrome).")
    ] = "proto",
    reference: Annotated[
        str | None,
        typer.Option(help="Host whose clock the trace keeps [default: the first decode host]."),
    ] = None,
    max_events: Annotated[
        int, typer.Option(help="At most this many events; page writes past it per step.")
    ] = 500_000,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="A torch profiler / Kineto JSON trace of the same window to open beside."
        ),
    ] = None,
    profile_host: Annotated[
        str | None, typer.Option(help="Host the profile was recorded on [default: --reference].")
    ] = None,
    scrub: ScrubOpt = False,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """The incident as a Perfetto trace: hosts, requests, steps, transfers, page writes, load.

    Example: forensics trace --out incident.pftrace   (open it in ui.perfetto.dev)
    """
    from .artifacts.trace import trace as run_trace

    with _scope(db, run, since, until) as s:
        res = run_trace(s, out_file, None, format, reference, max_events, profile, profile_host,
                        scrub)  # fmt: skip
    if json:
        _write_json(res.as_dict())
        return
    for line in res.sentences():
        out.print(line, highlight=False, markup=False)


@app.command()
def bundle(
    db: DbOpt = None,
    run: Annotated[
        list[str], typer.Option(help="A run to include (repeatable) [default: all].")
    ] = [],  # noqa: B006
    out_file: Annotated[Path, typer.Option("--out", help="The bundle.")] = Path("incident.tar.zst"),
    with_inputs: Annotated[bool, typer.Option(help="Add the raw inputs.")] = False,
    redact_prompts: Annotated[
        bool, typer.Option(help="Replace user text by an HMAC under a key printed once.")
    ] = False,
    since: SinceOpt = None,
    until: UntilOpt = None,
    json: JsonOpt = False,
) -> None:
    """One file for a bug report: report, suspects, dashboard, trace, sources, versions, tables.

    Example: forensics bundle --out incident.tar.zst --redact-prompts
    """
    from .artifacts.bundle import bundle as run_bundle

    with _scope(db, run, since, until) as s:
        res = run_bundle(s, out_file, None, with_inputs, redact_prompts)
    if json:
        _write_json(res.as_dict())
        return
    for line in res.sentences():
        out.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command()
def patterns(
    check: Annotated[
        Path | None, typer.Option("--check", help="A pattern file (TOML) to verify.")
    ] = None,
) -> None:
    """List the built-in log patterns, or verify a pattern file against its sample lines.

    Example: forensics patterns --check my-fork.toml
    """
    from .parsers.patterns import builtin as builtin_patterns
    from .parsers.patterns import load_file as load_patterns

    pats = load_patterns(check) if check else builtin_patterns(check_samples=True)
    t = Table(title=f"{len(pats)} patterns, every sample line passes")
    for c in ("name", "table", "needle", "samples"):
        t.add_column(c)
    for p in pats:
        t.add_row(p.name, p.table, p.needle, str(len(p.samples)))
    out.print(t)


@app.command()
def repro(
    url: Annotated[
        str, typer.Argument(help="The server, e.g. http://127.0.0.1:30000 (a trailing /v1 too).")
    ],
    sessions: Annotated[
        str, typer.Option(help="Concurrent sessions; a list (10,20,40) sweeps: one run each.")
    ] = "60",
    rounds: Annotated[int, typer.Option(help="User turns per session.")] = 8,
    model: Annotated[str | None, typer.Option(help="[default: the server's first model]")] = None,
    run: Annotated[str, typer.Option(help="Run name (a sweep adds -s<N>).")] = "repro",
    tag: Annotated[list[str], typer.Option(help="KEY=VALUE label of the run (repeatable).")] = [],  # noqa: B006
    out_file: Annotated[Path, typer.Option("--out", help="Results (JSON lines).")] = Path(
        "results.jsonl"
    ),
    overwrite: Annotated[bool, typer.Option(help="Replace --out if it exists.")] = False,
    scenario: Annotated[
        Path | None,
        typer.Option(help="Scenario (TOML) [default: agentic tool use, long contexts]."),
    ] = None,
    golden: Annotated[
        bool,
        typer.Option(help="Replay every session alone at temperature 0 first; judge divergence."),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds a request may take.")] = 120.0,
    retries: Annotated[
        int, typer.Option(help="Send a failed request again, up to N times (each its own result).")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of contexts, tool results, sampling.")] = 0,
    stream: Annotated[
        bool | None, typer.Option("--stream/--no-stream", help="[default: the scenario's]")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="OPENAI_API_KEY", help="Bearer token, if the server wants one."),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Drive an OpenAI-compatible server with concurrent agent sessions; judge every reply.

    Example: forensics repro http://127.0.0.1:30000 --sessions 10,20,40 --run overlap-on
    """
    from . import terminal
    from .repro import repro as run_repro

    try:
        levels = [int(x) for x in sessions.split(",") if x.strip()]
    except ValueError:
        raise ForensicsError(
            f"--sessions takes whole numbers (10 or 10,20,40), not {sessions!r}"
        ) from None
    live = terminal.ReproLive(err) if err.is_terminal and not json else None
    with live or contextlib.nullcontext():
        res = run_repro(
            url, sessions=levels, rounds=rounds, model=model, run=run, tags=_tags(tag),
            out=out_file, scenario=scenario, golden=golden, timeout=timeout, seed=seed,
            stream=stream, api_key=api_key, overwrite=overwrite, retries=retries,
            progress=live.update if live else None,
        )  # fmt: skip
    _emit(res, json, terminal.repro)
    if res.interrupted:
        raise typer.Exit(130)


@app.command()
def upgrade(db: DbOpt = None, wait: WaitOpt = 60.0) -> None:
    """Bring a database written by an older pd-forensics up to this version's schema.

    Example: forensics upgrade --db incident.duckdb
    """
    before, after = upgrade_db(db, wait, _waiting(wait))
    what = "already at" if before == after else f"schema {before} →"
    out.print(f"{db_path(db)}: {what} schema {after}")
    if before != after and before <= LEGACY_VERSION:
        from .store.legacy import backup_name

        out.print(f"the old file is kept as {backup_name(db_path(db), before)} (delete it "
                  "when you no longer need it)")  # fmt: skip


@app.command()
def verify(db: DbOpt = None, json: JsonOpt = False) -> None:
    """Read every shard file whole: its sha256, rows and table as registered, and the
    catalog's standing with its shard folder. Exit 0 when clean, 1 when damaged.

    Example: forensics verify --db incident.duckdb
    """
    from .store.integrity import verify as run_verify

    res = run_verify(db)
    if json:
        _write_json(res.as_dict())
    else:
        for line in res.sentences():
            out.print(line)
    if not res.clean:
        raise typer.Exit(1)


@app.command(name="copy")
def copy_cmd(
    dst: Annotated[
        str,
        typer.Argument(
            help="The copy's catalog (or a folder to put it in: one that exists, or DIR/)."
        ),
    ],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
) -> None:
    """Copy the incident (catalog and shard folder) with an identity of its own: both
    read and write independently. A copy of the .duckdb file alone shares the original's
    shards and opens read-only.

    Example: forensics copy backup/incident.duckdb --db incident.duckdb
    """
    from .store.relocate import copy_incident

    out.print(f"copied {db_path(db)} to {copy_incident(db, dst, wait, _waiting(wait))}")


@app.command(name="mv")
def mv_cmd(
    dst: Annotated[
        str,
        typer.Argument(
            help="The new catalog path (or a folder to move to: one that exists, or DIR/)."
        ),
    ],
    db: DbOpt = None,
    wait: WaitOpt = 60.0,
) -> None:
    """Rename or move the incident: the catalog and its shard folder together. One that
    was interrupted is finished by running it again.

    Example: forensics mv flag-off.duckdb --db incident.duckdb
    """
    from .store.relocate import move_incident

    out.print(f"moved {db_path(db)} to {move_incident(db, dst, wait, _waiting(wait))}")


@app.command()
def demo(
    dir: Annotated[Path, typer.Option("--dir", help="Where the incident's files go.")] = Path(
        "demo-incident"
    ),
    stock: Annotated[
        bool,
        typer.Option("--stock", help="As stock SGLang prints it: no probe records."),
    ] = False,
    json: JsonOpt = False,
) -> None:
    """Generate a small incident (prefill + decode journals, harness results) and ingest it.

    Example: forensics demo --dir /tmp/incident --stock
    """
    from .synthetic.demo import demo as run_demo

    res = run_demo(dir, stock=stock)
    if not json:
        how = (
            "rendered by journalctl from a real .journal"
            if res.real_journal
            else "rendered by pd-forensics"
        )
        out.print(
            f"demo incident in {res.dir}: {', '.join(p.name for p in res.files)} (decode {how})"
        )
    from . import terminal
    from .analyses.report import report as run_report

    rep = run_report(res.ingest.db)
    if json:
        more = {"report": rep.as_dict(), "dashboard": res.dashboard.as_dict()}
        _print_ingest(res.ingest, json, more)
        return
    _print_ingest(res.ingest, json)
    terminal.report(out, rep)
    _print_dashboard(res.dashboard)
    db = res.ingest.db
    out.print(
        f"next: `export FORENSICS_DB={db}` (or `forensics --db {db} …`), then "
        "`forensics rooms`, `forensics suspects`, `forensics trace --out incident.pftrace`",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="DuckDB file for the command after it (as its own --db)."),
    ] = None,
) -> None:
    if version:
        out.print(__version__)
        raise typer.Exit()
    if db is not None:
        # `forensics --db X rooms` as `forensics rooms --db X`: every command's --db reads
        # FORENSICS_DB when it is not given, and one given after the command still wins
        os.environ["FORENSICS_DB"] = str(db)


def _fail(message: str, code: int = 2) -> None:
    # Plain write: one line, never wrapped by the console width; scrubbed, for an error
    # may quote what the user typed (a run named after a URL with its password)
    from .scrubbing import scrub

    sys.stderr.write("error: " + visible(" ".join(scrub(message).split())) + "\n")
    sys.exit(code)


DEBUG_ENV = "FORENSICS_DEBUG"
INTERRUPTED = "interrupted: nothing was written"


def _usage_error(exc: BaseException) -> str | None:
    """The message of a command-line usage error (click's, or the copy typer vendors)."""
    if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
        return None
    ctx = getattr(exc, "ctx", None)
    where = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
    return f"{exc.format_message()}{where}"


def _is_abort(exc: BaseException) -> bool:
    # click (and typer's vendored click) turn Ctrl-C into Abort.
    return type(exc).__name__ == "Abort" and isinstance(exc, RuntimeError)


def _failure(exc: BaseException, interrupted: bool, debug: bool) -> tuple[str, int]:
    """The one line and the exit code for an exception that ended a command."""
    if isinstance(exc, KeyboardInterrupt) and getattr(exc, "said", None):
        return exc.said, 130  # after a commit: what was written stays
    if (
        interrupted
        or _is_abort(exc)
        or isinstance(exc, KeyboardInterrupt | duckdb.InterruptException)
    ):
        return INTERRUPTED, 130  # whatever Ctrl-C turned into on its way out
    patterns = sys.modules.get("forensics.parsers.patterns")  # loaded if it could raise
    if isinstance(exc, ForensicsError) or (patterns and isinstance(exc, patterns.PatternError)):
        return str(exc), 2
    if isinstance(exc, duckdb.Error):
        first = str(exc).splitlines()[0]
        if ".parquet" in first:  # a shard unreadable though its size was right
            first += " (a shard may be damaged: `forensics verify` names it and the way out)"
        return f"database: {first}", 2
    usage = _usage_error(exc)
    if usage is not None:
        return usage, 2
    if (full := _disk(exc)) is not None:
        return full, 2
    if debug:
        traceback.print_exception(exc)
    hint = "" if debug else f" (run with --debug or {DEBUG_ENV}=1 for the traceback)"
    first = (str(exc).splitlines() or [""])[0]
    return f"unexpected {type(exc).__name__}: {first}{hint}", 1


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _disk(exc: BaseException) -> str | None:
    """A write the disk refused (full, over quota, read-only): one line naming the path,
    not an unexpected error. pyarrow's own OSError carries the reason in its text only."""
    if not isinstance(exc, OSError):
        return None
    if exc.errno in _DISK_ERRNOS:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or os.strerror(exc.errno)}"
    first = (str(exc).splitlines() or [""])[0]
    if "No space left on device" in first or "Disk quota exceeded" in first:
        return f"{first}"
    return None


def main(argv: list[str] | None = None) -> None:
    """Every failure is one line on stderr and a non-zero exit: 2 for errors, 130 for
    Ctrl-C. `--debug` (anywhere) or FORENSICS_DEBUG=1 adds the traceback of the
    unexpected ones."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    args = [a for a in args if a != "--debug"]
    interrupted = threading.Event()

    def on_sigint(signum, frame) -> None:
        interrupted.set()  # DuckDB may turn the KeyboardInterrupt into its own error
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_sigint)
    try:
        rv = app(args=args, prog_name="forensics", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    except BaseException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]  # the help text, as asked
            sys.exit(2)
        _fail(*_failure(exc, interrupted.is_set(), debug))
    if interrupted.is_set():
        _fail(INTERRUPTED, 130)
    sys.exit(rv if isinstance(rv, int) else 0)


def run() -> None:
    """The installed command: main(), then out without tearing the interpreter down.
    Unloading DuckDB's and pydantic's modules took 0.15 s of a 0.9 s answer (median of 8
    runs of `forensics compare`); nothing is left to run at exit: connections are closed,
    threads joined and temporary files gone before main() returns."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        # the reader may be gone (a closed pipe) or the stream closed
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()
    os._exit(code or 0)


__all__ = ["app", "db_path", "main", "run"]
