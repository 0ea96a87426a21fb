"""Layer 1, the math: state maps, truncation, norms, contraction and projections, bounds,
gradients, the figure style and plotting helpers, atomic result files and where they live.
Imports torch, numpy and matplotlib, nothing of the course."""
