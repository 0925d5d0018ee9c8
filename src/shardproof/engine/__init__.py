"""The engine: relation inference and proof, numerics for counterexamples, verdicts.

Its modules import each other one way, at load time, in this order: a module imports only
modules listed before it (tests/test_architecture.py checks it; a new module takes its place here).

1. what a run reports and spends: result, budget, next_step, positions, assumptions
2. checks over reports and events: causes, partial_outputs, temporal, blocks
3. running the ranks: lockstep, executor, numeric
4. symbolic interpretation: parametric, classes, tables, induction, symbolic
5. the relation each tensor holds: status
6. a finding at the first broken tensor: diagnose, local, localize, views
7. relating the two programs, the verdict: verify
8. after a verdict (confirming, replaying, repairing, mutating): confirm, replay, rng, mutation_edits,
   mutant_classes, mutants, repair
"""
