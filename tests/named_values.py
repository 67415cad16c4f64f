"""The labelled corpus of named values (tests/data/named-values.tsv) and its score: what
the value namer gets right, by the corpus header's rules. bench/templates.py prints the
same numbers as a bench row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl
from forensics.parsers.jsonlines import readable

CORPUS = Path(__file__).parent / "data" / "named-values.tsv"


@dataclass(frozen=True)
class Row:
    family: str
    origin: str
    template: str  # lines of one label are one template
    labels: tuple[tuple[frozenset[str], str], ...]  # (accepted names, value)
    line: str


def load(path: Path = CORPUS) -> list[Row]:
    rows = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw or raw.startswith("#"):
            continue
        family, origin, template, labels, line = raw.split("\t", 4)
        labs = []
        for part in labels.split("; "):
            names, _, value = part.partition("=")
            labs.append((frozenset(names.split("|")), value))
        rows.append(Row(family, origin, template, tuple(labs), readable(line)))
    return rows


def _touches(v: str, label: str) -> bool:
    return v == label or (len(label) >= 4 and label in v) or (len(v) >= 4 and v in label)


@dataclass
class Score:
    lines: int
    labels: int
    found: int  # labels named exactly under an accepted name
    named: int  # named values that answer a label (by name, or by value where none does)
    correct: int
    full: int  # lines with every label found
    misses: list[tuple[str, str, str]]  # (family, label, line)

    @property
    def recall(self) -> float:
        return self.found / self.labels

    @property
    def precision(self) -> float:
        return self.correct / self.named if self.named else 1.0

    @property
    def understood(self) -> float:
        return self.full / self.lines


def score(rows: list[Row]) -> Score:
    """A named value is correct when its value is exact and its name accepted. It answers
    a label when its name is one of the label's, or (for a label no pair names exactly)
    when its value is the label's or holds it (a split identifier is wrong, not absent)."""
    from forensics.parsers.templates import named

    lines = pl.Series([r.line for r in rows])
    got = named(lines).to_list()
    typed = _typed_fields(lines)
    s = Score(len(rows), 0, 0, 0, 0, 0, [])
    for i, (row, pairs_raw) in enumerate(zip(rows, got, strict=True)):
        pairs = typed.get(i, []) + [(d["key"], d["value"]) for d in pairs_raw or []]
        exact = [any(k in names and v == value for k, v in pairs) for names, value in row.labels]
        s.labels += len(row.labels)
        s.found += sum(exact)
        s.full += all(exact)
        s.misses += [(row.family, f"{'|'.join(sorted(n))}={v}", row.line)
                     for (n, v), ok in zip(row.labels, exact, strict=True) if not ok]  # fmt: skip
        for k, v in pairs:
            answers = [
                (names, value) for (names, value), ok in zip(row.labels, exact, strict=True)
                if k in names or (not ok and _touches(v, value))
            ]  # fmt: skip
            if answers:
                s.named += 1
                s.correct += any(k in names and v == value for names, value in answers)
    return s


def _typed_fields(lines: pl.Series) -> dict[int, list[tuple[str, str]]]:
    """What the built-in patterns read of each line: a row of its typed table, each
    field a named value (a line a pattern reads is understood by its row); a batch's
    `extra` JSON holds the fields no column names (`#transferring-req`)."""
    from forensics.parsers.patterns import builtin, classify
    from forensics.parsers.ranktags import rank_tags

    found, _ = classify(builtin(), lines)
    out: dict[int, list[tuple[str, str]]] = {}
    for i, tags in enumerate(rank_tags(lines).to_dicts()):  # the prefix's, on every row
        out[i] = [(k, str(v)) for k, v in tags.items() if v is not None]
    for df in found.values():
        for rec in df.to_dicts():
            row = int(rec.pop("row"))
            extra = orjson.loads(rec.pop("extra") or "{}") if "extra" in rec else {}
            out.setdefault(row, []).extend(
                (k, str(v)) for k, v in {**rec, **extra}.items()
                if v is not None and k != "pattern"
            )  # fmt: skip
    return out


def grouping(rows: list[Row], stored: bool = False) -> float:
    """Grouping accuracy (Zhu et al., Loghub): the share of lines whose template holds
    exactly their label's lines. The masker's templates (as bench/templates.py measures
    its corpus), or `stored`: the templates a user gets, a line a built-in pattern reads
    being its pattern's."""
    from forensics.parsers import templates

    from forensics.store.records import _records_of

    n = len(rows)
    messages = pl.Series([r.line for r in rows])
    if stored:
        entries = pl.DataFrame(
            {"entry_no": range(n), "line_first": range(1, n + 1), "host": ["h"] * n,
             "ts_us": range(n), "priority": [6] * n, "message": messages, "fields": [None] * n},
            schema_overrides={"fields": pl.String, "priority": pl.Int64},
        )  # fmt: skip
        got = _records_of(entries)[0]["line"]["template"].to_list()
    else:
        got = templates.template_ids(templates.mask(messages)).to_list()
    by_label: dict[str, set[int]] = {}
    by_template: dict[int, set[int]] = {}
    for i, (row, t) in enumerate(zip(rows, got, strict=True)):
        by_label.setdefault(row.template, set()).add(i)
        by_template.setdefault(t, set()).add(i)
    ok = sum(by_label[r.template] == by_template[t] for r, t in zip(rows, got, strict=True))
    return ok / n
