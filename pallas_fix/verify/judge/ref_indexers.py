"""The indexers of a ref access equation, rebuilt from its flattened operands (for the oracle).

``get`` / ``swap`` / ``addupdate``, ``masked_load`` / ``masked_swap``, TPU ``dma_start``, Mosaic
GPU copies / loads / stores have known layouts; anything else with treedef params is handled best
effort. Imports jax lazily, inside the functions.
"""

from __future__ import annotations

from typing import Any

# Primitives that only wait on / signal something already described by another
# equation (the DMA start, the barrier): counting them would double count.
_SKIP_PRIMITIVES = frozenset({
    "dma_wait",
    "wait_gmem_to_smem",
    "wait_smem_to_gmem",
    "wait_load_tmem",
    "wgmma_wait",
})
_SKIP_SUBSTRINGS = ("semaphore", "barrier")


def is_var(x) -> bool:
    """A traced jaxpr variable (not a Literal, not a Python/NumPy constant)."""
    from jax._src import core

    if isinstance(x, core.Literal):
        return False
    return isinstance(x, core.Var)


def _is_treedef(v) -> bool:
    from jax import tree_util

    return isinstance(v, tree_util.PyTreeDef)


def _is_ndindexer(x) -> bool:
    return (hasattr(x, "indices") and hasattr(x, "shape")
            and hasattr(x, "int_indexer_shape"))


def is_slice(x) -> bool:
    return hasattr(x, "start") and hasattr(x, "size") and hasattr(x, "stride")


def find_indexers(obj: Any, depth: int = 0) -> list[Any]:
    """All NDIndexers in a rebuilt operand (transform tuple, TransformedRef...),
    in transform-chain order."""
    if depth > 8 or obj is None:
        return []
    if _is_ndindexer(obj):
        return [obj]
    if isinstance(obj, (tuple, list)):
        out = []
        for x in obj:
            out.extend(find_indexers(x, depth + 1))
        return out
    if isinstance(obj, dict):
        out = []
        for x in obj.values():
            out.extend(find_indexers(x, depth + 1))
        return out
    transforms = getattr(obj, "transforms", None)
    if transforms is not None and hasattr(obj, "ref"):
        return find_indexers(transforms, depth + 1)
    return []


def _unflatten(tree, leaves):
    return tree.unflatten(list(leaves))


def operands(eqn) -> list[tuple[str, Any]]:
    """(label, rebuilt operand/transforms) pairs whose indexers matter."""
    name = eqn.primitive.name
    if name in _SKIP_PRIMITIVES or any(s in name for s in _SKIP_SUBSTRINGS):
        return []
    try:
        return _known_operands(eqn)
    except Exception:  # a layout this jax version does not use
        return _generic_operands(eqn)


def _known_operands(eqn) -> list[tuple[str, Any]]:
    name = eqn.primitive.name
    p = eqn.params
    iv = list(eqn.invars)
    if name == "get" and "tree" in p:
        return [("ref", _unflatten(p["tree"], iv[1:]))]
    if name in ("swap", "addupdate") and "tree" in p:
        return [("ref", _unflatten(p["tree"], iv[2:]))]
    if name in ("masked_load", "masked_swap") and "args_tree" in p:
        parts = _unflatten(p["args_tree"], iv)
        return [("ref", parts[1])]
    if name == "dma_start" and "tree" in p:
        src, dst, *_sems_and_device = _unflatten(p["tree"], iv)
        return [("src", src), ("dst", dst)]
    if name in ("copy_smem_to_gmem", "copy_gmem_to_smem"):
        s_tree = p["src_transforms_treedef"]
        d_tree = p["dst_transforms_treedef"]
        off = 2 + (1 if p.get("has_barrier") else 0)
        ns, nd = s_tree.num_leaves, d_tree.num_leaves
        return [("src", _unflatten(s_tree, iv[off:off + ns])),
                ("dst", _unflatten(d_tree, iv[off + ns:off + ns + nd]))]
    if name == "async_prefetch" and "ref_transforms_treedef" in p:
        t = p["ref_transforms_treedef"]
        return [("ref", _unflatten(t, iv[1:1 + t.num_leaves]))]
    if name == "async_store_smem" and "ref_transforms_treedef" in p:
        t = p["ref_transforms_treedef"]
        return [("dst", _unflatten(t, iv[4:4 + t.num_leaves]))]
    if name in ("load", "store") and "tree" in p:  # Mosaic GPU load/store
        t = p["tree"]
        return [("ref", _unflatten(t, iv[len(iv) - t.num_leaves:]))]
    return _generic_operands(eqn)


def _label(key: str) -> str:
    if key in ("tree", "args_tree"):
        return "ref"
    for suffix in ("_transforms_treedef", "_transforms_tree", "_treedef", "_tree"):
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)]
    return key


def _generic_operands(eqn) -> list[tuple[str, Any]]:
    """Best effort for primitives not handled explicitly: find the treedef
    params and the run of invars they were flattened from."""
    p = eqn.params
    iv = list(eqn.invars)
    trees = [(k, v) for k, v in p.items() if _is_treedef(v)]
    if not trees:
        return []
    if len(trees) == 1:
        k, t = trees[0]
        n = t.num_leaves
        offsets = [0] if n == len(iv) else []
        offsets.append(len(iv) - n)
        if p.get("has_user_predicate"):
            offsets.append(len(iv) - n - 1)
        for off in offsets:
            if off < 0:
                continue
            try:
                obj = _unflatten(t, iv[off:off + n])
            except Exception:
                continue
            if find_indexers(obj):
                return [(_label(k), obj)]
        return []
    # several trees: consecutive runs after the leading ref operands
    lead = 0
    for v in iv:
        aval = getattr(v, "aval", None)
        if aval is not None and hasattr(aval, "inner_aval"):
            lead += 1
        else:
            break
    out = []
    off = lead
    for k, t in trees:
        n = t.num_leaves
        try:
            out.append((_label(k), _unflatten(t, iv[off:off + n])))
        except Exception:
            return []
        off += n
    return out


def aval_str(x) -> str | None:
    aval = getattr(x, "aval", None)
    if aval is None:
        return None
    try:
        return aval.str_short()
    except Exception:
        return str(aval)


def ndim(x) -> int:
    aval = getattr(x, "aval", None)
    shape = getattr(aval, "shape", ())
    try:
        return len(shape)
    except TypeError:
        return 0
