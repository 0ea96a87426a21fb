"""Layer 3, the paper's lemmas and propositions as experiments: truncation, gradients,
weights close, tightness, the LSTM certificate, Chapter 4's experiments. Imports ``core``
and ``symbolic``; never ``figures``."""
