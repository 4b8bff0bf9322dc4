"""Why pallas-fix's flash-attention rewrite is slower than JAX's kernel, and what closes the gap.

Variants of the rewrite of tpu_pairs/flash_attention.py (grid (batch*heads, q blocks, key
blocks), online-softmax state in VMEM scratch), each changing one thing:
- strip_mM: the key grid block holds M of the user's windows and the user's own loop walks them
  inside a step (m = gcd(windows, M), so it divides every trip count);
- lane: the running max and sum kept lane-dense, (block_q, 128) with every lane equal, widened
  with jnp.tile, as JAX's ops/tpu/flash_attention.py keeps them (instead of (block_q, 1));
- unroll: the inner loop unrolled (JAX's kernel unrolls its block_k loop inside block_k_major);
beside JAX's kernel with block_k_major = 512 and 2048 and the user's original.

    PYTHONUNBUFFERED=1 python3 benchmarks/tpu_experiments/flash_strip_lanes.py --json $OUT/x.json
    python3 benchmarks/tpu_experiments/flash_strip_lanes.py --smoke   # CPU, interpret mode
"""
import functools, json, math, sys
HERE = __import__("pathlib").Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1])); sys.path.insert(0, str(HERE.parent / "tpu_pairs"))
import jax, jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from pallas_fix.verify.device.timing import looped, time_per_call
import flash_attention as pair

INTERPRET = "--smoke" in sys.argv


def strip_kernel(q_ref, k_ref, v_ref, o_ref, o_scratch_ref, m_ref, l_ref, *, sm_scale, block_k, lane, unroll):
    _, block_q, head_dim = q_ref.shape
    q = q_ref[0]

    def kv_step(j, carry):
        o, m, l = carry
        kv = pl.multiple_of(j * block_k, block_k)
        k = k_ref[0, pl.ds(kv, block_k), :]
        v = v_ref[0, pl.ds(kv, block_k), :]
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * sm_scale
        m_next = jnp.maximum(m, jnp.max(s, axis=1, keepdims=True))
        alpha = jnp.exp(m - m_next)
        if lane:
            p = jnp.exp(s - jnp.tile(m_next, (1, block_k // 128)))
            a = jnp.tile(alpha, (1, head_dim // 128))
        else:
            p = jnp.exp(s - m_next)
            a = alpha
        l_next = alpha * l + jnp.sum(p, axis=1, keepdims=True)
        o_next = a * o + jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
        return o_next, m_next, l_next

    @pl.when(pl.program_id(2) == 0)
    def _init():
        o_scratch_ref[...] = jnp.zeros((block_q, head_dim), jnp.float32)
        m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
        l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)

    o, m, l = lax.fori_loop(0, k_ref.shape[1] // block_k, kv_step, (o_scratch_ref[...], m_ref[...], l_ref[...]), unroll=unroll)
    o_scratch_ref[...] = o
    m_ref[...] = m
    l_ref[...] = l

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _finalize():
        o_ref[0] = (o / (jnp.tile(l, (1, head_dim // 128)) if lane else l)).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_q", "block_k", "m", "lane", "unroll"))
def strip(q, k, v, *, block_q, block_k, m, lane=False, unroll=False):
    bh, q_len, d = q.shape
    kv_len = k.shape[1]
    kv_windows = math.gcd(kv_len // block_k, m)
    kernel = functools.partial(strip_kernel, sm_scale=1.0 / math.sqrt(d), block_k=block_k, lane=lane, unroll=unroll)
    ml = 128 if lane else 1
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(bh, q_len // block_q, kv_len // (block_k * kv_windows)),
        in_specs=[
            pl.BlockSpec((1, block_q, d), lambda b, i, j: (b, i, 0)),
            pl.BlockSpec((1, block_k * kv_windows, d), lambda b, i, j: (b, j, 0)),
            pl.BlockSpec((1, block_k * kv_windows, d), lambda b, i, j: (b, j, 0)),
        ],
        out_specs=pl.BlockSpec((1, block_q, d), lambda b, i, j: (b, i, 0)),
        scratch_shapes=[pltpu.VMEM((block_q, d), jnp.float32), pltpu.VMEM((block_q, ml), jnp.float32),
                        pltpu.VMEM((block_q, ml), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary")),
        interpret=INTERPRET,
    )(q, k, v)


def hand_major(q, k, v, *, block_q, block_k, major):
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    sizes = fa.BlockSizes(block_q=block_q, block_k_major=major, block_k=block_k, block_b=1)
    return fa.flash_attention(q[None], k[None], v[None], causal=False, sm_scale=1.0 / math.sqrt(q.shape[-1]), block_sizes=sizes)[0]


def main():
    out_path = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    cases = [("float32", (2, 512, 128), 128, 128)] if INTERPRET else [
        ("float32", (2, 16384, 128), 256, 512), ("float32", (4, 2048, 128), 256, 512), ("bfloat16", (8, 2048, 128), 256, 512)]
    rows = []
    for dtype, shape, bq, bk in cases:
        ks = jax.random.split(jax.random.PRNGKey(0), 3)
        q, k, v = (jax.random.normal(kk, shape, dtype) for kk in ks)
        ref = jnp.asarray(pair.xla(q, k, v), jnp.float32)
        variants = [(f"strip_m{mm_}", functools.partial(strip, block_q=bq, block_k=bk, m=mm_)) for mm_ in (1, 4)]
        variants += [(f"strip_lane_m{mm_}", functools.partial(strip, block_q=bq, block_k=bk, m=mm_, lane=True)) for mm_ in (1, 4)]
        variants += [(f"strip_lane_unroll_m{mm_}", functools.partial(strip, block_q=bq, block_k=bk, m=mm_, lane=True, unroll=True)) for mm_ in (4,)]
        variants += [(f"strip_unroll_m{mm_}", functools.partial(strip, block_q=bq, block_k=bk, m=mm_, unroll=True)) for mm_ in (4,)]
        if not INTERPRET:
            variants += [(f"hand_major{M}", functools.partial(hand_major, block_q=bq, block_k=bk, major=M)) for M in (512, 2048)]
            variants += [("orig", functools.partial(pair.attention, block_q=bq, block_k=bk))]
        for name, fn in variants:
            row = {"dtype": dtype, "shape": shape, "bq": bq, "bk": bk, "variant": name}
            try:
                if INTERPRET:
                    out = fn(q, k, v)
                else:
                    run = looped(fn, {})
                    out = jax.block_until_ready(run(1, q, k, v))[1]
                    row["ms"] = time_per_call(run, (q, k, v), 5)
                out = jnp.asarray(out, jnp.float32)
                row["err"] = float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref)))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    if out_path:
        json.dump(rows, open(out_path, "w"), indent=1)


main()
