"""Layer 3, the paper's lemmas and propositions as experiments: truncation, gradients,
weights close, tightness, LSTM stability. Imports ``core`` and ``symbolic``; never ``figures``."""
