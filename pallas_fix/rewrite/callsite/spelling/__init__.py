"""How a pallas_call's pieces are spelled, before any call site is read: what one block-shape
entry means (`block_dims.py`), the data types of operands and specs as written and the error that
refuses a call (`operands.py`), operand and spec lists built by code (`built_lists.py`; operands
chosen between two literals, `chosen_lists.py`) or written as one repeated spec
(`repeated_specs.py`), out_shapes built by code (`built_structs.py`; a
builder def's list read in the call's names, `returned_structs.py`, new nodes around the source's
own, `grafts.py`), and inserting keywords the way a person writes them (`keywords.py`).

May import core, analysis and rewrite.text; nothing else in rewrite.callsite."""
