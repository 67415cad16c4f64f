"""The canonical-form fast path (parsers/records/canonical.py) against the general reader:
the same rows and the same rejects, on the lines the probes write, the contract's own
examples, and every variation a tokeniser could get wrong."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import polars as pl
import pytest
from forensics.parsers.records import canonical, parse_records
from forensics.parsers.records.canonical import ORDER, split

from forensics.probes.lines import pages, record

ROOT = Path(__file__).resolve().parents[1]


def _frame(messages: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"message": messages, "fields": [None] * len(messages)},
        schema={"message": pl.String, "fields": pl.String},
    )


def _agree(messages: list[str]) -> None:
    fast = parse_records(_frame(messages))
    general = parse_records(_frame(messages), canonical=False)
    for kind in ("checksum", "canary", "step"):
        a, b = getattr(fast, kind), getattr(general, kind)
        assert a.equals(b), f"{kind} differs:\n{a}\n{b}"
    assert fast.rejects == general.rejects


def _probe_lines(rng: random.Random) -> list[str]:
    """Lines as forensics.probes writes them (same key order, same value forms)."""
    out = []
    for i in range(300):
        expected = rng.sample(range(2000), rng.randint(0, 6))
        changed = expected + rng.sample(range(2000), rng.randint(0, 40))
        out.append(record("canary", {
            "step": i, "layer": rng.randint(0, 60), "bs": 48, "mode": "replay",
            "expected": pages(expected), "changed": pages(changed),
            "unexpected": pages(set(changed) - set(expected)),
        }))  # fmt: skip
        out.append(record("step", {
            "step": i, "bs": 2, "rids": ",".join(f"{rng.getrandbits(64):x}" for _ in range(3)),
            "rooms": ",".join(str(rng.getrandbits(63)) for _ in range(3)),
        }))  # fmt: skip
        out.append(record("checksum", {
            "side": rng.choice(["src", "dst"]), "room": rng.getrandbits(63),
            "rid": None if i % 7 == 0 else f"{i:x}", "buf": "index_k", "layer": "all",
            "tp": i % 8, "dtype": "fp8", "nbytes": 262144, "head": f"{i:016x}",
            "tail": f"{i:08x}", "full": f"{i * 7:016x}",
        }))  # fmt: skip
    return out


def test_probe_written_records_agree_and_take_the_fast_path() -> None:
    lines = _probe_lines(random.Random(7))
    _agree(lines)
    body = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("forensics:canary ")]
    rows = pl.DataFrame({"row": range(len(body)), "body": body})
    fast, rest = split("canary", rows)
    assert len(fast) == len(body) and rest.is_empty()  # none left to the general reader


def test_trailing_keys_left_out_take_one_match(monkeypatch: pytest.MonkeyPatch) -> None:
    """Older probes and forks leave trailing keys out (a canary without `unexpected`):
    still one match per record, with the left-out keys empty, and the same rows as the
    general reader."""
    bodies = [
        "step=1 layer=2 bs=48 mode=replay expected=3,4 changed=3,4",
        "step=1 layer=3 bs=48",
        "step=1",
    ]
    _agree([f"forensics:canary {b}" for b in bodies])

    def no_second_path(kind: str, rows: pl.DataFrame):
        raise AssertionError(f"left to the field-by-field path: {rows['body'].to_list()}")

    monkeypatch.setattr(canonical, "_fields", no_second_path)
    fast, rest = split("canary", pl.DataFrame({"row": range(3), "body": bodies}))
    assert rest.is_empty()
    assert fast["expected"].to_list() == ["3,4", None, None]
    assert fast["unexpected"].to_list() == [None, None, None]
    assert fast["bs"].to_list() == ["48", "48", None]


def test_contract_examples_agree() -> None:
    doc = (ROOT / "docs" / "log-contract.md").read_text()
    lines = [ln for ln in doc.splitlines() if "forensics:" in ln and "=" in ln]
    assert len(lines) >= 3
    _agree(lines)


CANARY = "step=5 layer=30 bs=48 mode=replay expected=[14,15] changed=14,15,300-302 unexpected=[300] t_us=1796575723572378"
VARIANTS = [
    CANARY,
    "step=5 layer=30",  # optional keys left out
    "step=5 layer=30 changed=1-3",
    "layer=30 step=5",  # another order: general reader
    "step=5 step=6 layer=30",  # a key twice: the first counts
    "step=5 layer=30 extra=1",  # an unknown key
    "step=5 layer=30 stray",  # a word that is no pair
    'step=5 layer=30 mode="a b"',  # quotes
    "step=5  layer=30",  # two spaces
    "step=5\tlayer=30",  # a tab is no separator
    "step= layer=30",  # an empty value
    "step=5 layer=30 mode=a=b",  # "=" in a value
    "step=99999999999999999999 layer=1",  # too large
    "step=-3 layer=+4",
    "step=5 layer=30 changed=9-3",  # a range backwards
    "step=5 layer=30 changed=1-100000000",  # too many pages
    "step=5 layer=30 changed=[0-999999999999999999]",  # never expanded (no memory for it)
    "step=5 layer=30 changed=0-9223372036854775807",  # its span + 1 would wrap to negative
    "step=5 layer=30 changed=0-9223372036854775806,0-9223372036854775806",  # so would a sum
    "step=5 layer=30 expected=2 changed=32",  # counts
    "step=5 layer=30 expected=- changed=[] unexpected=[9]",
    "step=5 layer=30 expected=[ changed=]",
    "step=5 layer=30 changed=4,x",
    "",
    "step=5 layer=30 unexpected=1,1,2",
]
CHECKSUM = "side=src room=7301934425522180813 rid=9b1f buf=kv layer=all tp=3 dtype=fp8 nbytes=4096 head=aa tail=bb full=cc alg=2"
STEP = "step=3 bs=2 rids=[a,b] rooms=[1,2] t_us=1796575723572379"


@pytest.mark.parametrize("body", VARIANTS)
def test_canary_variants_agree(body: str) -> None:
    _agree(
        [f"forensics:canary {body}".rstrip(), f"[2026-11-29 07:00:01 TP0] forensics:canary {body}"]
    )


@pytest.mark.parametrize(
    "body",
    [
        CHECKSUM,
        "side=dst room=1 full=x",
        "side=dst room=1",  # no digest: a reject
        "side=up room=1 head=a",
        f"side=src room={1 << 63} head=a",
        f"side=src room={(1 << 63) - 1} head=a",
        "side=src room=0000000000000000001 head=a",
        "room=1 side=src head=a",
        "side=src room=1 head=a tp=x",
        "side=src room=1 head=a tail=b note=1",
        "side=src room=1 head=a alg=x",  # a reject
    ],
)
def test_checksum_variants_agree(body: str) -> None:
    _agree([f"forensics:checksum {body}"])


@pytest.mark.parametrize(
    "body",
    [STEP, "step=3", "step=3 rids= rooms=", "step=3 rids=- rooms=-", "step=3 rooms=1,x",
     "step=3 rooms=99999999999999999999", "bs=2 step=3", "step=x"],
)  # fmt: skip
def test_step_variants_agree(body: str) -> None:
    _agree([f"forensics:step {body}"])


def test_every_subset_and_order_of_keys_agrees() -> None:
    """Each kind: its keys left out in every combination, and shuffled."""
    values = {
        "checksum": dict(p.split("=", 1) for p in CHECKSUM.split()),
        "canary": dict(p.split("=", 1) for p in CANARY.split()),
        "step": dict(p.split("=", 1) for p in STEP.split()),
    }
    rng = random.Random(3)
    lines = []
    for kind, keys in ORDER.items():
        for n in range(len(keys) + 1):
            for kept in itertools.islice(itertools.combinations(keys, n), 40):
                pairs = [f"{k}={values[kind][k]}" for k in kept]
                lines.append(f"forensics:{kind} " + " ".join(pairs))
                rng.shuffle(pairs)
                lines.append(f"forensics:{kind} " + " ".join(pairs))
    _agree(lines)
