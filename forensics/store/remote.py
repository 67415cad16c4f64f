"""Ingest past one machine: one Ray task per input, on the node that holds it
(`forensics ingest --ray HOST:PATH ...`). The only module that imports ray (the extra
`pd-forensics[ray]`); pd-forensics must be installed on every node.

A task stages its input as a local ingest does (stage.py) and hands the files back: into
a folder every node and the driver reach (`shared`), else through Ray's object store.
Registration is the driver's, in input order, as for local workers. An input whose task
fails, or that cannot be placed, registers nothing and is reported; the others register.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import ForensicsError
from .inputs import Input
from .stage import Options, SourceResult, Staged, stage

HOST_LABEL = "forensics.io/host"  # a node's label naming the host whose files it reads


@dataclass(frozen=True)
class RemoteInput:
    host: str
    path: str

    @property
    def name(self) -> str:
        return f"{self.host}:{self.path}"


def parse(specs: list[str]) -> list[RemoteInput]:
    """HOST:PATH arguments (the path as the node sees it)."""
    out = []
    for s in specs:
        host, sep, path = s.partition(":")
        if not sep or not host or not path:
            raise ForensicsError(f"--ray takes HOST:PATH inputs, got {s!r}")
        out.append(RemoteInput(host, path))
    return out


def place(nodes: list[dict], host: str) -> tuple[str | None, str]:
    """The node for a host's input: (node id, "") or (None, why not). The node labelled
    forensics.io/host=HOST, else the node whose address is HOST; several is refused."""
    alive = [n for n in nodes if n.get("Alive")]
    labelled = [n for n in alive if (n.get("Labels") or {}).get(HOST_LABEL) == host]
    if len(labelled) == 1:
        return labelled[0]["NodeID"], ""
    if len(labelled) > 1:
        return None, f"{len(labelled)} nodes are labelled {HOST_LABEL}={host}"
    by_address = [n for n in alive if host in (n.get("NodeManagerAddress"),
                                               n.get("NodeManagerHostname"))]  # fmt: skip
    if len(by_address) == 1:
        return by_address[0]["NodeID"], ""
    if len(by_address) > 1:
        return None, (f"{len(by_address)} nodes have the address {host}: label one "
                      f"{HOST_LABEL}={host}")  # fmt: skip
    return None, f"no node is labelled {HOST_LABEL}={host} or has that address"


def _task(path: str, opts: Options, shared: str | None) -> tuple[Staged, dict[str, bytes], str]:
    """On the node: stage one input; (what it held, its files unless shared, node id)."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    if shared is not None:
        folder = Path(shared) / f"forensics-{uuid.uuid4().hex}"
        return stage(Input(path, Path(path)), folder, opts), {}, node
    with tempfile.TemporaryDirectory(prefix="forensics-") as tmp:
        st = stage(Input(path, Path(path)), Path(tmp) / "staged", opts)
        files = {name: (Path(tmp) / "staged" / name).read_bytes()
                 for names in st.files.values() for name in names}  # fmt: skip
        return st, files, node


def _failed(inp: RemoteInput, why: str) -> Staged:
    return Staged(SourceResult(inp.name, "-", "failed", reason=why), inp.name)


def stage_on_ray(
    inputs: list[RemoteInput],
    where: Path,
    opts: Options,
    address: str | None = None,
    cpus: float = 1.0,
    timeout: float = 600.0,
    shared: Path | None = None,
) -> list[Staged]:
    """Every input staged by a task on its host's node, its files in `where/<index>`."""
    try:
        import ray
        from ray.exceptions import RayError, RayTaskError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise ForensicsError("--ray needs Ray: pip install 'pd-forensics[ray]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False,
                     configure_logging=False)  # fmt: skip
        except (ConnectionError, RayError, ValueError) as exc:
            raise ForensicsError(f"cannot reach Ray at {address or 'auto'}: {exc}") from None
    nodes = ray.nodes()
    task = ray.remote(_task)
    out: dict[int, Staged] = {}
    refs: dict = {}
    for i, inp in enumerate(inputs):
        node, why = place(nodes, inp.host)
        if node is None:
            out[i] = _failed(inp, f"cannot be placed: {why}")
            continue
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        ref = task.options(num_cpus=cpus, scheduling_strategy=strategy, max_retries=0).remote(
            inp.path, opts, str(shared) if shared else None
        )
        refs[ref] = i
    done, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
    for ref in late:
        ray.cancel(ref, force=True)
        out[refs[ref]] = _failed(inputs[refs[ref]],
                                 f"not placed or done within {timeout:g} s")  # fmt: skip
    for ref in done:
        i = refs[ref]
        try:
            st, files, node = ray.get(ref)
        except RayTaskError as exc:
            cause = exc.cause if exc.cause is not None else exc
            out[i] = _failed(inputs[i], str(cause).strip().splitlines()[-1])
            continue
        except RayError as exc:
            out[i] = _failed(inputs[i], f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        target = where / str(i)
        if st.folder is not None:
            if shared is not None:
                shutil.move(st.folder, target)
            else:
                target.mkdir()
                for name, data in files.items():
                    (target / name).write_bytes(data)
            st.folder = str(target)
        st.result.name = st.path = inputs[i].name
        st.result.notes.append(f"read on Ray node {node}")
        out[i] = st
    return [out[i] for i in range(len(inputs))]
