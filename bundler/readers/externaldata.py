"""A model's external data: the files its tensors name (`location`), read from the .onnx and checked as text.

ONNX keeps the weights of a model over 2 GB in files beside the .onnx, each tensor naming its file relative
to the model's folder. `onnx` itself once followed hostile locations out of that folder (CVE-2024-27318,
CVE-2024-27319), so every location is checked as text (`bundler.names.location_problem`) before onnx or ORT
opens a file: relative, below the model's folder, no `..`, a name every file system can hold. What is on disk (links, sizes) is checked by
the callers, which know where the files are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bundler.names import location_problem

MISSING_PIN = ("the manifest pins no such data file; add it to the model's [[models.data]] "
               "(`ort-bundler init --from model.onnx` pins them all)")


@dataclass(frozen=True, kw_only=True)
class ExternalRef:
    """One tensor whose bytes live in another file: where, and which bytes (length None: to the end)."""

    tensor: str
    location: str
    offset: int
    length: int | None
    initializer: bool  # a graph initializer, as ONNX's own converter writes them (else a node attribute's tensor)

    @property
    def end(self) -> int | None:
        return None if self.length is None else self.offset + self.length


def external_refs(model: Any) -> list[ExternalRef]:
    """Every tensor of an `onnx.ModelProto` (loaded without its data) that keeps its bytes in a file."""
    import onnx

    refs = []
    for tensor, initializer in _tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {entry.key: entry.value for entry in tensor.external_data}
        refs.append(ExternalRef(tensor=tensor.name, location=entries.get("location", ""),
                                offset=_integer(entries.get("offset", "0")),
                                length=_integer(entries["length"]) if "length" in entries else None,
                                initializer=initializer))
    return refs


def without_external_initializers(model: Any) -> Any:
    """A copy of the model whose external initializers are typed graph inputs instead.

    ONNX's checker opens every data file itself and refuses one with several hard links, which is how the
    gate stages the cache's files beside the model (ORT reads them as they are). On this copy it checks the
    graph, its types and shapes without opening a data file; the locations are checked here as text.
    """
    import onnx
    from onnx import helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    inputs = {value.name for value in graph.input}
    kept = []
    for tensor in graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(tensor)
        elif tensor.name not in inputs:
            graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return copy


def _integer(text: str) -> int:
    return int(text) if text.isdigit() else -1  # a negative value is refused as a range below


def _tensors(model: Any) -> Iterator[tuple[Any, bool]]:
    """Every tensor of the main graph, its subgraphs and the model's functions (all the places ORT reads),
    each with whether it is an initializer of the main graph."""
    yield from ((tensor, True) for tensor in model.graph.initializer)
    graphs: list[Any] = []
    nodes = [*model.graph.node, *(node for function in model.functions for node in function.node)]
    sparse = list(model.graph.sparse_initializer)
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            yield from ((tensor, False) for tensor in graph.initializer)
            sparse.extend(graph.sparse_initializer)
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            yield from ((tensor, False) for tensor in attribute.tensors)
            if attribute.HasField("t"):
                yield attribute.t, False
            sparse.extend(attribute.sparse_tensors)
            if attribute.HasField("sparse_tensor"):
                sparse.append(attribute.sparse_tensor)
            if attribute.HasField("g"):
                graphs.append(attribute.g)
            graphs.extend(attribute.graphs)
    yield from ((part, False) for tensor in sparse for part in (tensor.values, tensor.indices))


def reference_problems(label: str, refs: list[ExternalRef], sizes: Mapping[str, int], *,
                       missing: str = MISSING_PIN) -> list[str]:
    """One sentence per mismatch between what the model's tensors reference and the data files pinned for it.

    `sizes` maps each pinned location to its file's size in bytes; `missing` ends the sentence for a
    location that has no file.
    """
    problems = []
    for ref in refs:
        where = f"{label}: tensor '{ref.tensor}' keeps its data at location '{ref.location}'"
        if not ref.initializer:
            problems.append(f"{where} but is not an initializer (a node attribute's tensor); expected external "
                            "data for initializers only, as onnx.save_model(..., save_as_external_data=True) writes")
        elif problem := location_problem(ref.location):
            problems.append(f"{where}, which {problem}")
        elif ref.location not in sizes:
            problems.append(f"{where}, but {missing}")
        elif ref.offset < 0 or (ref.length is not None and ref.length < 0):
            problems.append(f"{where} with an offset or length that is not a non-negative integer")
        elif (ref.end or ref.offset) > sizes[ref.location]:
            problems.append(f"{where}, bytes {ref.offset} to {ref.end or ref.offset}, but that file has only "
                            f"{sizes[ref.location]} bytes")
    referenced = {ref.location for ref in refs}
    problems += [f"{label}: data file '{location}' is pinned, but no tensor of the model references it; "
                 "remove it from the model's data" for location in sorted(set(sizes) - referenced)]
    return problems
