"""How a kernel is handed on to its pallas_call: as a parameter of the function that holds the
call (`passed_in`), through a chain of launcher helpers (`relay_chain`), with the call's settings
in a `**kwargs` dict (`splat_dict`), and the static tests (`if config.backend == "triton":`) such
a chain reads (`static_test`). Discovery uses them to make one site per kernel handed on.

May import core, analysis's root modules (context, tree_index) and analysis.effects; never
analysis.discovery, which sits above this room."""
