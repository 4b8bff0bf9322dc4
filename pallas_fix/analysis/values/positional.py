"""Reads of a name at a position: which binding a read sees (analysis.values.reaching) and what it holds.

`Env` (analysis.values.provenance) takes these methods: a name its function binds more than once has a
value per read, not per name (`off = i * bs; off = pl.multiple_of(off, bs)`), and a loop carry
that steps with the loop reads as the loop's induction (analysis.loops.induction).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from pallas_fix.analysis.values.bindings import Unpack
from pallas_fix.analysis.loops.induction import carry_induction
from pallas_fix.analysis.loops.loops import describe_loop
from pallas_fix.analysis.values.reaching import OUTER, augmented_value, reaching_binding, static_truth
from pallas_fix.analysis.values.values import Val
from pallas_fix.core.model import Origin


class PositionalReads:
    """Mixin of provenance.Env: reads at a position. Needs the Env's `ctx`, `scope`, `params`,
    `bindings()`, `owner()`, `value()`, `static_int()`, `static_value_expr()`,
    `single_assignment()` and `_binding_val()`, and the caches `_at`, `_augmented`, `_params_read`."""

    def reaching(self, name: cst.Name) -> Optional[tuple["PositionalReads", tuple]]:
        """The binding the read `name` sees and the environment owning it, for a name its scope
        binds more than once (a parameter counts as one binding); OUTER: it reads the parameter.
        None for a name bound once (read it without a position) or when the code cannot tell."""
        env = self.owner(name.value)
        if env is None or not env.bound_more_than_once(name.value):
            return None
        found = reaching_binding(self.ctx, env.scope, env.bindings()[name.value], name, self.static_truth)
        if found is None or (found is OUTER and name.value not in env.params):
            return None  # unknown, or read before its first binding: not a value pallas-fix models
        return env, found

    def bound_more_than_once(self, name: str) -> bool:
        """Whether this function binds `name` more than once (its parameter counts as once)."""
        binds = self.bindings().get(name, [])
        return not isinstance(self.scope, cst.Module) and len(binds) + (name in self.params) > 1

    def reaching_assignment(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        """The expression `name` holds where it is read: its one assignment, or, for a name bound
        several times, the assignment that reaches the read (`r += 1` holds `r + 1`); None when
        straight-line code does not decide which binding that is."""
        env = self.owner(name.value)
        if env is None or not env.bound_more_than_once(name.value):
            return self.single_assignment(name.value)
        found = self.reaching(name)
        if found is None:
            return None
        env, (how, node) = found
        if how == "assign" and isinstance(node, cst.BaseExpression):
            return node
        return env._augmented_value(node) if how == "augassign" else None

    def param_reaches(self, name: cst.Name) -> bool:
        """Whether the read `name` sees its owner's parameter, not a rebinding of it."""
        env = self.owner(name.value)
        if env is None or name.value not in env.params:
            return False
        return name.value not in env.bindings() or (self.reaching(name) or (None, None))[1] is OUTER

    def static_truth(self, test: cst.BaseExpression) -> Optional[bool]:
        return None if self.value(test).dynamic else static_truth(test, self.static_int, self.static_value_expr)

    def _value_at(self, name: cst.Name) -> Optional[Val]:
        key = id(name)
        if key not in self._at:
            self._at[key] = None  # a read that leads back to itself: fall back to the name's value
            self._at[key] = self._reached_value(name)
        return self._at[key]

    def _reached_value(self, name: cst.Name) -> Optional[Val]:
        found = self.reaching(name)
        if found is None:
            return None
        env, binding = found
        if binding is OUTER:
            return env.param_value(name.value)
        how, node = binding
        if how == "augassign":
            return env.value(env._augmented_value(node))
        return env._binding_val(how, node) if how == "assign" else None

    def _augmented_value(self, node: cst.AugAssign) -> cst.BinaryOperation:
        if id(node) not in self._augmented:
            self._augmented[id(node)] = augmented_value(node)
        return self._augmented[id(node)]

    def param_value(self, name: str) -> Val:
        """A parameter's value; a loop carry that steps by a static amount from a static start
        reads as the loop's induction (`init + step * k`, analysis.loops.induction)."""
        val = self.params[name]
        if val.carry_loop is None:
            return val
        if name not in self._params_read:
            self._params_read[name] = val  # while the update is read: the plain carry
            found = carry_induction(val.carry_loop, self, lambda read: read.value == name and self.param_reaches(read))
            if found is not None:
                words = f"the carry `{name}`, which steps with {describe_loop(self.ctx, val.carry_loop)}"
                self._params_read[name] = Val(Origin.LOOP, "int", words, loop=val.carry_loop, induction=found)
        return self._params_read[name]

    def induction_of(self, name: cst.Name) -> Optional[Val]:
        """The value of a read of a loop carry that steps with the loop (analysis.loops.induction): the
        body's parameter, or a leaf `acc, off = carry` unpacks from it; None for anything else."""
        env = self.owner(name.value)
        if env is None:
            return None
        if self.param_reaches(name):
            val = env.param_value(name.value)
        else:
            binding = self.binding_at(name)
            val = env._leaf_induction(binding[1]) if binding is not None and binding[0] == "assign" else None
        return val if val is not None and val.induction is not None else None

    def binding_at(self, name: cst.Name) -> Optional[tuple]:
        """The binding a read `name` sees in its owner: its only one, or the one reaching it."""
        env = self.owner(name.value)
        if env is None or isinstance(env.scope, cst.Module):
            return None
        if env.bound_more_than_once(name.value):
            found = self.reaching(name)
            return None if found is None or found[1] is OUTER else found[1]
        binds = env.bindings().get(name.value, [])
        return binds[0] if binds else None

    def _leaf_induction(self, node) -> Optional[Val]:
        """`acc, off = carry` binds `off` to leaf 1 of a carry parameter: an induction when the
        loop steps that leaf by a static amount."""
        if not (isinstance(node, Unpack) and isinstance(node.value, cst.Name) and self.param_reaches(node.value)):
            return None
        carry = self.params[node.value.value]
        if carry.carry_loop is None:
            return None
        key = f"{node.value.value}[{node.index}]"
        if key not in self._params_read:
            self._params_read[key] = carry
            found = carry_induction(carry.carry_loop, self, lambda read: self.binding_at(read) == ("assign", node), node.index)
            if found is not None:
                words = f"the carry leaf `{key}`, which steps with {describe_loop(self.ctx, carry.carry_loop)}"
                self._params_read[key] = Val(Origin.LOOP, "int", words, loop=carry.carry_loop, induction=found)
        return self._params_read[key]
