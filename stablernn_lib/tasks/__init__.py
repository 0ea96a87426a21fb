"""Layer 4, the trained tasks: one training loop (``training``), WikiText-2 language models
(``wikitext2``), JSB Chorales music models (``jsb``), the benchmark. Imports the layers below."""
