"""sglang-router's approximate radix tree: which worker ("tenant") has seen which text prefix.

The tree is built only from the router's own routing history (no feedback from the engines), over
characters in HTTP mode, exactly as ``smg:src/policies/tree.rs`` does. Each node remembers, per
tenant, when that tenant last used the node; eviction removes a tenant's least recently used leaves
until its character count fits ``max_size``; leaves used at the same instant go in the order they
were created (a per-tree counter), never in an order taken from object addresses, which would make
a run depend on what the process allocated before it.

This is a faithful *model* of the peer's algorithm for the benchmark, not our gateway's prefix index
(which hashes token blocks, see ``igw.scheduling``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class _Node:
    text: str
    parent: _Node | None
    created: int
    """The tree's creation counter when this node was made: the eviction tie-break."""
    children: dict[str, _Node] = field(default_factory=dict)
    tenants: dict[str, float] = field(default_factory=dict)
    """tenant -> last access time; insertion order is the tie-break order (see ``prefix_match``)."""


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    matched_chars: int
    tenant: str | None


def _common_prefix_len(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    i = 0
    while i < limit and a[i] == b[i]:
        i += 1
    return i


class ApproximateRadixTree:
    """Character radix tree with per-tenant LRU timestamps and per-tenant size accounting."""

    def __init__(self) -> None:
        self._created = itertools.count()
        self._root = _Node(text="", parent=None, created=next(self._created))
        self._tenant_chars: dict[str, int] = {}

    def tenant_size(self, tenant: str) -> int:
        """Characters currently attributed to ``tenant`` (its share of the tree)."""
        return self._tenant_chars.get(tenant, 0)

    def _mark(self, node: _Node, tenant: str, now: float) -> None:
        if tenant not in node.tenants:
            self._tenant_chars[tenant] = self._tenant_chars.get(tenant, 0) + len(node.text)
        node.tenants[tenant] = now

    def insert(self, text: str, tenant: str, *, now: float) -> None:
        """Record that ``text`` was routed to ``tenant`` at ``now`` (splitting edges as needed)."""
        node = self._root
        self._mark(node, tenant, now)
        rest = text
        while rest:
            child = node.children.get(rest[0])
            if child is None:
                leaf = _Node(text=rest, parent=node, created=next(self._created))
                node.children[rest[0]] = leaf
                self._mark(leaf, tenant, now)
                return
            shared = _common_prefix_len(child.text, rest)
            if shared < len(child.text):
                child = self._split(child, shared)
            self._mark(child, tenant, now)
            node = child
            rest = rest[shared:]

    def _split(self, child: _Node, at: int) -> _Node:
        """Cut ``child``'s edge after ``at`` characters; the new upper node keeps its tenants."""
        parent = child.parent
        assert parent is not None
        upper = _Node(
            text=child.text[:at], parent=parent, created=next(self._created), tenants=dict(child.tenants)
        )
        parent.children[upper.text[0]] = upper
        child.text = child.text[at:]
        child.parent = upper
        upper.children[child.text[0]] = child
        return upper

    def prefix_match(self, text: str, *, allowed: Collection[str], now: float) -> PrefixMatch:
        """Longest prefix of ``text`` seen by any tenant in ``allowed``, and one such tenant.

        As in smg, a partially matched edge counts its matched characters, and the tenant returned
        is the first one recorded on the deepest matched node (smg takes the first entry of an
        unordered map; insertion order makes this deterministic). Only ``allowed`` tenants count,
        so that removed workers are never chosen. The chosen tenant's timestamps are refreshed.
        """
        node = self._root
        matched = 0
        rest = text
        while rest:
            child = node.children.get(rest[0])
            if child is None or not any(t in allowed for t in child.tenants):
                break
            shared = _common_prefix_len(child.text, rest)
            matched += shared
            node = child
            if shared < len(child.text):
                break
            rest = rest[shared:]
        if node is self._root:
            return PrefixMatch(matched_chars=0, tenant=None)
        tenant = next((t for t in node.tenants if t in allowed), None)
        if tenant is not None:
            walk: _Node | None = node
            while walk is not None:
                if tenant in walk.tenants:
                    walk.tenants[tenant] = now
                walk = walk.parent
        return PrefixMatch(matched_chars=matched if tenant is not None else 0, tenant=tenant)

    def evict_tenants_by_size(self, max_size: int) -> None:
        """Drop each oversized tenant's least recently used leaves until it fits ``max_size``."""
        for tenant, size in list(self._tenant_chars.items()):
            if size <= max_size:
                continue
            leaves = [(n.tenants[tenant], n.created, n) for n in self._tenant_leaves(tenant)]
            heapq.heapify(leaves)
            while self._tenant_chars[tenant] > max_size and leaves:
                _, _, leaf = heapq.heappop(leaves)
                parent = self._remove_tenant(leaf, tenant)
                if parent is not None and parent is not self._root and self._is_tenant_leaf(parent, tenant):
                    heapq.heappush(leaves, (parent.tenants[tenant], parent.created, parent))

    def _tenant_leaves(self, tenant: str) -> list[_Node]:
        found: list[_Node] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node is not self._root and self._is_tenant_leaf(node, tenant):
                found.append(node)
            stack.extend(c for c in node.children.values() if tenant in c.tenants)
        return found

    @staticmethod
    def _is_tenant_leaf(node: _Node, tenant: str) -> bool:
        return tenant in node.tenants and not any(tenant in c.tenants for c in node.children.values())

    def _remove_tenant(self, node: _Node, tenant: str) -> _Node | None:
        del node.tenants[tenant]
        self._tenant_chars[tenant] -= len(node.text)
        parent = node.parent
        if not node.tenants and parent is not None and not node.children:
            del parent.children[node.text[0]]
        return parent
