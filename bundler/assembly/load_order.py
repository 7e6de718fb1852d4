"""The order GPU libraries are loaded in before ONNX Runtime: each after the libraries it needs, ties broken by a
family rank (the runtime before cuBLAS before cuDNN…) and then by name, so the order is stable across builds.
One definition for the Windows DLLs (import tables) and the Linux libraries (DT_NEEDED)."""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence


def dependency_order(needs: Mapping[str, set[str]], ranks: Sequence[re.Pattern[str]]) -> tuple[list[str], list[str]]:
    """(the names in load order, the names left over because they need each other in a cycle). `needs` maps each
    name to the names it needs among those given."""
    pending = {name: set(deps) & needs.keys() - {name} for name, deps in needs.items()}
    users: dict[str, set[str]] = {name: set() for name in pending}
    for name, deps in pending.items():
        for dep in deps:
            users[dep].add(name)

    def rank(name: str) -> tuple[int, str]:
        return next((i for i, family in enumerate(ranks) if family.match(name)), len(ranks)), name

    ready = [rank(name) for name, deps in pending.items() if not deps]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for user in sorted(users[name]):
            pending[user].discard(name)
            if not pending[user]:
                heapq.heappush(ready, rank(user))
    return order, sorted(set(pending) - set(order))
