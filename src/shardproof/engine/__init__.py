"""The engine: relation inference and proof, numerics for counterexamples, verdicts."""
