"""Ingest on Ray (`forensics ingest --ray HOST:PATH ...`): the views equal a local ingest of
the same files; each input runs on its host's node (labels first, then addresses); an
input that cannot be placed or fails registers nothing while the others register."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray
from forensics.parsers.tables import SHARDED
from ray.cluster_utils import Cluster

import forensics
from forensics.store.ingest import RaySettings
from forensics.store.remote import HOST_LABEL, place

from .helpers import cli


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (started once: about 7 s on two cores)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.nodes()[0]["NodeManagerAddress"]
    ray.shutdown()


def _rows(db: Path) -> dict[str, list[tuple]]:
    out = {t: forensics.query_rows(f"SELECT * FROM {t} ORDER BY ALL", db)[1] for t in SHARDED}
    out["sources"] = forensics.query_rows(
        "SELECT source_id, run, sha256, bytes, format, lines, entries, duplicates, rejoined,"
        " quarantined, markers FROM sources ORDER BY ALL", db)[1]  # fmt: skip
    for name in ("rooms", "requests", "request_evidence"):
        out[name] = forensics.query_rows(f"SELECT * FROM {name} ORDER BY ALL", db)[1]
    return out


@pytest.mark.parametrize("shared", [False, True])  # the object store; a shared folder
def test_views_equal_a_local_ingest(local_ray, renderings, tmp_path: Path, shared: bool) -> None:
    lines = renderings["json"].read_bytes().splitlines(keepends=True)
    (tmp_path / "early.json").write_bytes(b"".join(lines[: len(lines) // 2 + 3]))
    (tmp_path / "late.json").write_bytes(b"".join(lines[len(lines) // 2 - 3 :]))
    paths = [str(tmp_path / "early.json"), str(tmp_path / "late.json"),
             str(renderings["export"])]  # fmt: skip
    local, remote = tmp_path / "local.duckdb", tmp_path / "ray.duckdb"
    forensics.ingest(paths, local)
    settings = RaySettings(shared=tmp_path / "shared" if shared else None)
    if shared:
        settings.shared.mkdir()  # type: ignore[union-attr]
    res = forensics.ingest([f"{local_ray}:{p}" for p in paths], remote, ray=settings)
    assert not res.failed and [s.source_id for s in res.sources] == [1, 2, 3]
    assert res.sources[1].duplicates > 0  # the overlap, deduped in input order
    assert _rows(remote) == _rows(local)
    assert all(any("read on Ray node" in n for n in s.notes) for s in res.sources)
    if shared:
        assert not any(settings.shared.iterdir())  # type: ignore[union-attr]


def test_place_prefers_labels_and_refuses_ambiguity() -> None:
    nodes = [
        {"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.1", "Labels": {}},
        {"NodeID": "b", "Alive": True, "NodeManagerAddress": "10.0.0.2",
         "Labels": {HOST_LABEL: "10.0.0.1"}},
        {"NodeID": "c", "Alive": True, "NodeManagerAddress": "10.0.0.3",
         "Labels": {HOST_LABEL: "twin"}},
        {"NodeID": "d", "Alive": True, "NodeManagerAddress": "10.0.0.3",
         "Labels": {HOST_LABEL: "twin"}},
        {"NodeID": "e", "Alive": False, "NodeManagerAddress": "10.0.0.9", "Labels": {}},
    ]  # fmt: skip
    assert place(nodes, "10.0.0.1") == ("b", "")  # the label wins over the address
    assert place(nodes, "10.0.0.2") == ("b", "")
    assert place(nodes, "twin")[0] is None and "2 nodes are labelled" in place(nodes, "twin")[1]
    assert place(nodes, "10.0.0.3")[0] is None and "label one" in place(nodes, "10.0.0.3")[1]
    assert place(nodes, "10.0.0.9")[0] is None  # a dead node takes nothing


def test_inputs_run_on_their_hosts_nodes_and_failures_register_nothing(
    renderings, tmp_path: Path
) -> None:
    ray.shutdown()  # the module's local Ray: a cluster of labelled nodes instead
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "labels": {HOST_LABEL: "decode-0"}})  # fmt: skip
    try:
        cluster.add_node(num_cpus=1, labels={HOST_LABEL: "prefill-0"})
        cluster.add_node(num_cpus=1, labels={HOST_LABEL: "twin"})
        cluster.add_node(num_cpus=1, labels={HOST_LABEL: "twin"})
        ray.init(address=cluster.address, log_to_driver=False)
        by_label = {n["Labels"][HOST_LABEL]: n["NodeID"] for n in ray.nodes()}
        address = ray.nodes()[0]["NodeManagerAddress"]  # every node of a Cluster shares it
        db = tmp_path / "db.duckdb"
        specs = [
            f"decode-0:{renderings['json']}",
            f"prefill-0:{renderings['export']}",
            f"nowhere-0:{renderings['short']}",  # no such node
            f"twin:{renderings['short']}",  # two nodes claim it
            f"{address}:{renderings['short']}",  # the address of four nodes
            f"prefill-0:{tmp_path / 'missing.log'}",  # the task fails on its node
        ]
        res = forensics.ingest(specs, db, ray=RaySettings(timeout=120))
        assert [s.status for s in res.sources] == ["ingested", "ingested"] + ["failed"] * 4
        notes = [next(n for n in s.notes if "Ray node" in n) for s in res.sources[:2]]
        assert notes == [f"read on Ray node {by_label['decode-0']}",
                         f"read on Ray node {by_label['prefill-0']}"]  # fmt: skip
        reasons = [s.reason for s in res.failed]
        assert "no node is labelled" in reasons[0] and "2 nodes are labelled" in reasons[1]
        assert "label one" in reasons[2] and "missing.log" in reasons[3]
        assert [s["path"] for s in forensics.list_sources(db)] == specs[:2]
        ray.shutdown()
        # the command says which inputs registered nothing, and exits non-zero
        proc = cli("ingest", "--ray", "--ray-address", cluster.address, "--db", str(db),
                   f"decode-0:{renderings['short']}", f"nowhere-0:{renderings['cat']}")  # fmt: skip
        assert proc.returncode == 1, proc.stderr.decode()
        assert f"error: nowhere-0:{renderings['cat']} registered nothing" in proc.stderr.decode()
        assert len(forensics.list_sources(db)) == 3
    finally:
        ray.shutdown()
        cluster.shutdown()
