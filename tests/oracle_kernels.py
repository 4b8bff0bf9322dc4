"""Small Pallas kernels for tests/test_oracle.py.

Lines the oracle must report carry a marker comment ``# ORACLE:<tag>``; the
tests look the markers up in this file's text, so no line number is hard-coded.
Every entry point takes (x[, idx]) and is traced with ShapeDtypeStructs; only a
few are also run with ``interpret=True``.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

N, D, BS = 32, 128, 8
NB = N // BS

X = jax.ShapeDtypeStruct((N, D), jnp.float32)
IDX = jax.ShapeDtypeStruct((NB,), jnp.int32)


def _call(kernel, *, interpret=True, grid=(), in_specs=None, name=None, **kw):
    extra = {}
    if in_specs is not None:
        extra["in_specs"] = in_specs
    if name is not None:
        extra["name"] = name
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((N, D), jnp.float32),
        grid=grid,
        interpret=interpret,
        **extra,
        **kw,
    )


# --- fori_loop index --------------------------------------------------------
def fori_kernel(x_ref, o_ref):
    def body(i, carry):
        o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 2.0  # ORACLE:fori
        return carry

    lax.fori_loop(0, NB, body, 0)


def fori(x):
    return _call(fori_kernel)(x)


# --- pl.loop decorator -------------------------------------------------------
def ploop_kernel(x_ref, o_ref):
    @pl.loop(0, NB)
    def _(i):
        o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] + 1.0  # ORACLE:ploop


def ploop(x):
    return _call(ploop_kernel)(x)


# --- program_id start, whole-array blocks -----------------------------------
def pid_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] - 1.0  # ORACLE:pid


def pid(x):
    return _call(pid_kernel, grid=(NB,))(x)


# --- static starts: nothing to report ---------------------------------------
def static_kernel(x_ref, o_ref):
    o_ref[pl.ds(0, BS), :] = x_ref[pl.ds(8, BS), :]
    o_ref[8:16, :] = x_ref[16:24, :]
    o_ref[3, :] = x_ref[4, :]
    o_ref[pl.ds(jnp.int32(3), BS), :] = x_ref[pl.ds(24, BS), :]  # ORACLE:literal
    o_ref[...] = x_ref[...]


def static(x):
    return _call(static_kernel)(x)


# --- jnp.int32(3) * BS is computed in the kernel: a Var, counted -------------
def jnp_const_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]
    o_ref[pl.ds(0, BS), :] = x_ref[pl.ds(jnp.int32(3) * BS, BS), :]  # ORACLE:jnpconst


def jnp_const(x):
    return _call(jnp_const_kernel)(x)


# --- start loaded from a ref (scalar prefetch-like SMEM input) ---------------
def refload_kernel(x_ref, idx_ref, o_ref):
    o_ref[...] = x_ref[...]
    s = idx_ref[1]
    o_ref[pl.ds(0, BS), :] = x_ref[pl.ds(s * BS, BS), :]  # ORACLE:refload


def refload(x, idx):
    return _call(refload_kernel, in_specs=[pl.BlockSpec(), pl.BlockSpec(memory_space=pltpu.SMEM)])(x, idx)


# --- dynamic size: fails at trace time ---------------------------------------
def dynsize_kernel(x_ref, idx_ref, o_ref):
    n = idx_ref[0]
    o_ref[pl.ds(0, n), :] = x_ref[pl.ds(0, n), :]


def dynsize(x, idx):
    return _call(dynsize_kernel, in_specs=[pl.BlockSpec(), pl.BlockSpec(memory_space=pltpu.SMEM)])(x, idx)


# --- integer-array index -----------------------------------------------------
def intarray_kernel(x_ref, o_ref):
    def body(i, carry):
        rows = x_ref[i * BS + jnp.arange(BS), :]  # ORACLE:intarray
        o_ref[pl.ds(i * BS, BS), :] = rows  # ORACLE:intarray_store
        return carry

    lax.fori_loop(0, NB, body, 0)


def intarray(x):
    return _call(intarray_kernel)(x)


# --- traced scalar index idx_ref[k]: recorded, not counted -------------------
def scalar_kernel(x_ref, idx_ref, o_ref):
    o_ref[...] = x_ref[...]

    def body(k, carry):
        j = idx_ref[k]  # ORACLE:scalar_idx
        o_ref[k, :] = x_ref[j, :]  # ORACLE:scalar_rows
        return carry

    lax.fori_loop(0, NB, body, 0)


def scalar(x, idx):
    return _call(scalar_kernel, in_specs=[pl.BlockSpec(), pl.BlockSpec(memory_space=pltpu.SMEM)])(x, idx)


# --- DMAs --------------------------------------------------------------------
def dma_kernel(x_hbm, o_ref, buf, sem):
    def body(i, carry):
        pltpu.sync_copy(x_hbm.at[pl.ds(i * BS, BS)], buf)  # ORACLE:sync_copy
        o_ref[pl.ds(i * BS, BS), :] = buf[...]  # ORACLE:dma_store
        cp = pltpu.make_async_copy(
            x_hbm.at[pl.ds(i * BS, BS)],  # ORACLE:async_slice
            buf,
            sem,
        )
        cp.start()  # ORACLE:async_start
        cp.wait()
        return carry

    lax.fori_loop(0, NB, body, 0)


def dma(x):
    return _call(
        dma_kernel,
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((BS, D), jnp.float32), pltpu.SemaphoreType.DMA(())],
    )(x)


# --- += and explicit addupdate -----------------------------------------------
def accum_kernel(x_ref, o_ref):
    o_ref[...] = jnp.zeros_like(o_ref)

    def body(i, carry):
        o_ref[pl.ds(0, BS), :] += x_ref[pl.ds(i * BS, BS), :]  # ORACLE:iadd
        jax.ref.addupdate(o_ref, (pl.ds(i * BS, BS), slice(None)), x_ref[pl.ds(0, BS), :])  # ORACLE:addupdate
        return carry

    lax.fori_loop(0, NB, body, 0)


def accum(x):
    return _call(accum_kernel)(x)


# --- nested loops --------------------------------------------------------------
def nested_kernel(x_ref, o_ref):
    def outer(i, c):
        def inner(j, c2):
            off = i * (2 * 4) + j * 4  # ORACLE:nested_off
            o_ref[pl.ds(off, 4), :] = x_ref[pl.ds(off, 4), :]  # ORACLE:nested
            return c2

        return lax.fori_loop(0, 2, inner, c)

    lax.fori_loop(0, NB, outer, 0)


def nested(x):
    return _call(nested_kernel)(x)


# --- cond branches: lax.cond and pl.when ----------------------------------------
def cond_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]

    def body(i, c):
        def even():
            o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :] * 3.0  # ORACLE:cond_true

        def odd():
            pass

        lax.cond(i % 2 == 0, even, odd)

        @pl.when(i > 0)
        def _():
            o_ref[pl.ds(i * BS - 1, 1), :] = x_ref[pl.ds(0, 1), :]  # ORACLE:when

        return c

    lax.fori_loop(0, NB, body, 0)


def cond(x):
    return _call(cond_kernel)(x)


# --- pallas_call inside jax.jit, two calls, a static kwarg --------------------
@functools.partial(jax.jit, static_argnames=("scale",))
def jitted_two(x, scale=2.0):
    y = _call(fori_kernel, name="first")(x)
    return _call(ploop_kernel)(y) * scale


# --- multi-line statements (which line does jax report?) ----------------------
def multiline_kernel(x_ref, o_ref):
    def body(i, carry):
        v = (x_ref[  # ORACLE:ml_get
            pl.ds(i * BS, BS), :])
        o_ref[  # ORACLE:ml_swap
            pl.ds(i * BS, BS),
            :,
        ] = v
        return carry

    lax.fori_loop(0, NB, body, 0)


def multiline(x):
    return _call(multiline_kernel)(x)


# --- helper function doing the indexing ------------------------------------------
def _load_block(ref, i):
    return ref[pl.ds(i * BS, BS), :]  # ORACLE:helper


def helper_kernel(x_ref, o_ref):
    def body(i, carry):
        o_ref[pl.ds(0, BS), :] = _load_block(x_ref, i)  # ORACLE:helper_call
        return carry

    lax.fori_loop(0, NB, body, 0)


def helper(x):
    return _call(helper_kernel)(x)


# --- TPU load/store (masked_load / masked_swap in some versions) ---------------
def tpu_ldst_kernel(x_ref, o_ref):
    def body(i, carry):
        v = pltpu.load(x_ref.at[pl.ds(i * BS, BS), :])  # ORACLE:tpu_load
        pltpu.store(o_ref.at[pl.ds(i * BS, BS), :], v)  # ORACLE:tpu_store
        return carry

    lax.fori_loop(0, NB, body, 0)


def tpu_ldst(x):
    return _call(tpu_ldst_kernel)(x)


# --- .at view then a second (traced) index: two NDIndexers in the chain ---------
def chain_kernel(x_ref, o_ref):
    def body(i, carry):
        view = x_ref.at[pl.ds(i * 2 * BS, 2 * BS)]
        o_ref[pl.ds(0, BS), :] = view[pl.ds(i, BS), :]  # ORACLE:chain
        return carry

    lax.fori_loop(0, 2, body, 0)


def chain(x):
    return _call(chain_kernel)(x)


# --- vmap of the pallas_call ---------------------------------------------------------
def vmapped(xs):
    return jax.vmap(fori)(xs)


# --- a pallas_call under a custom_vjp and under lax.scan in the outer program ---
@jax.custom_vjp
def custom(x):
    return fori(x)


def _custom_fwd(x):
    return fori(x), None


def _custom_bwd(_, g):
    return (g,)


custom.defvjp(_custom_fwd, _custom_bwd)


def scanned(x):
    def step(c, _):
        return fori(c), None

    out, _ = lax.scan(step, x, None, length=2)
    return out


# --- fori_loop with a traced bound: a while loop ---------------------------------
def while_kernel(x_ref, n_ref, o_ref):
    n = n_ref[0]

    def body(i, carry):
        o_ref[pl.ds(i * BS, BS), :] = x_ref[pl.ds(i * BS, BS), :]  # ORACLE:while
        return carry

    lax.fori_loop(0, n, body, 0)


def while_(x, n):
    return _call(while_kernel, in_specs=[pl.BlockSpec(), pl.BlockSpec(memory_space=pltpu.SMEM)])(x, n)


# --- pl.kernel over a TPU core mesh (core_map / mpmd_map, not pallas_call) -------
def _core_mesh():
    if hasattr(pltpu, "TensorCoreMesh"):
        return pltpu.TensorCoreMesh(axis_name="core", num_cores=1)
    return pltpu.create_tensorcore_mesh("core", num_cores=1)


def mesh_kernel_entry(x):
    @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=_core_mesh())
    def mesh_kernel(x_ref, o_ref):
        c = lax.axis_index("core")
        o_ref[pl.ds(c * BS, BS), :] = x_ref[pl.ds(c * BS, BS), :]  # ORACLE:mesh

    return mesh_kernel(x)


# --- GPU-interpret hazards: a (1,)-shaped start and a float start ----------------
def hazard_kernel(x_ref, idx_ref, o_ref):
    o_ref[...] = x_ref[...]

    def body(k, carry):
        st = idx_ref[pl.ds(k, 1)]  # ORACLE:onelem_load
        o_ref[pl.ds(0, BS), :] = x_ref[pl.ds(st, BS), :]  # ORACLE:onelem_use
        o_ref[pl.ds(BS, BS), :] = x_ref[pl.ds(k.astype(jnp.float32) * BS, BS), :]  # ORACLE:float_start
        return carry

    lax.fori_loop(0, NB, body, 0)


def hazard(x, idx):
    return _call(hazard_kernel, in_specs=[pl.BlockSpec(), pl.BlockSpec(memory_space=pltpu.SMEM)])(x, idx)
