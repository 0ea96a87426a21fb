"""WikiText-2 word-level language models (Chapter 8): the corpus, the model, training, analysis."""
