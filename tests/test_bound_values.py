"""The bounds' VALUES against independent computations (mutation-testing guards)."""
