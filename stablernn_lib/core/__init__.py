"""Layer 1, the math: state maps, truncation, norms and projections, bounds, gradients,
atomic result files and where they live. Imports torch and numpy only, nothing of the course."""
