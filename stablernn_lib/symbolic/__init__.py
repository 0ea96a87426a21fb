"""Layer 2, the sympy derivations of the paper's constants and Jacobians. Imports ``core`` only."""
