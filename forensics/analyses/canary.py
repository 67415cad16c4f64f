"""Where did decode write pages it should not have? Steps with unexpected page writes.

Rows of the `canary_writes` view (queries/canary_writes.sql) grouped by decode step:
which layers saw the writes, how many pages and which, who was in the batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..scope import Db, Runs, scoped
from ..store import first_row


@dataclass
class LayerWrites:
    layer: int
    n_expected: int | None
    n_changed: int | None
    n_unexpected: int
    pages: list[int] | None


@dataclass
class CanaryStep:
    run: str
    host: str | None
    step: int
    ts_us: int | None
    n_unexpected: int  # over the step's layers
    layers: list[LayerWrites]
    rids: list[str]
    corrupted: int  # requests of the batch marked corrupted

    def describe(self) -> str:
        worst = max(self.layers, key=lambda x: x.n_unexpected)
        where = f"{self.host} step {self.step}" if self.host else f"step {self.step}"
        return (
            f"{self.run}: {where}: {self.n_unexpected} unexpected page writes in layer"
            f"{'s' if len(self.layers) > 1 else ''} {', '.join(str(x.layer) for x in self.layers)}"
            f" (layer {worst.layer}: {worst.n_changed} pages changed where {worst.n_expected}"
            f" were expected; pages {page_ranges(worst.pages)}); batch of {len(self.rids)},"
            f" {self.corrupted} corrupted"
        )


@dataclass
class CanaryReport:
    steps: list[CanaryStep]  # the top steps, most unexpected writes first
    steps_with_writes: int
    canary_records: int

    def as_dict(self) -> dict:
        return {
            "steps_with_unexpected_writes": self.steps_with_writes,
            "canary_records": self.canary_records,
            "steps": [asdict(s) for s in self.steps],
        }

    def sentences(self) -> list[str]:
        if not self.canary_records:
            return ["no canary records: page writes were not watched"]
        if not self.steps:
            return [f"no unexpected page writes in {self.canary_records:,} canary records"]
        return [
            f"{self.steps_with_writes} decode steps wrote pages outside their expected set; "
            f"worst: {self.steps[0].describe()}"
        ]


def canary(db: Db = None, run: Runs = None, top: int = 10) -> CanaryReport:
    with scoped(db, run) as s:
        con = s.con
        where, params = s.where()
        n_records = first_row(con, f"SELECT count(*) FROM canary WHERE {where}", params)[0]
        n_steps = first_row(
            con,
            f"SELECT count(DISTINCT (run, host, step)) FROM canary_writes WHERE {where}",
            params,
        )[0]
        rows = con.execute(
            f"""WITH ranked AS (
                    SELECT run, host, step, sum(n_unexpected) AS total
                    FROM canary_writes WHERE {where} GROUP BY ALL
                    ORDER BY total DESC, run, host, step LIMIT ?
                )
                SELECT w.run, w.host, w.step, min(w.ts_us), r.total,
                       list(struct_pack(layer := w.layer, n_expected := w.n_expected,
                                        n_changed := w.n_changed, n_unexpected := w.n_unexpected,
                                        pages := w.pages) ORDER BY w.layer),
                       any_value(w.rids), max(w.corrupted)
                FROM canary_writes w
                JOIN ranked r
                  ON r.run = w.run AND r.host IS NOT DISTINCT FROM w.host AND r.step = w.step
                GROUP BY w.run, w.host, w.step, r.total
                ORDER BY r.total DESC, w.run, w.host, w.step""",
            [*params, top],
        ).fetchall()
        steps = []
        for run_, host, step, ts, total, layers, rids, bad in rows:
            writes = [LayerWrites(**x) for x in layers]
            steps.append(CanaryStep(run_, host, step, ts, int(total), writes, rids or [], bad or 0))
        return CanaryReport(steps, n_steps, n_records)


def page_ranges(pages: list[int] | None, limit: int = 6) -> str:
    """[300, 301, 302, 310] -> "300-302, 310"; long lists end in "… (N pages)"."""
    if pages is None:
        return "not listed"
    if not pages:
        return "none"
    runs: list[tuple[int, int]] = []
    for p in sorted(pages):
        if runs and p == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], p)
        else:
            runs.append((p, p))
    parts = [f"{a}-{b}" if b > a else str(a) for a, b in runs]
    text = ", ".join(parts[:limit])
    return text + (f", … ({len(pages)} pages)" if len(parts) > limit else "")
