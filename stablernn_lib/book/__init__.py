"""Layer 6, what the chapters need of the book: their glued values (:mod:`.glue`)."""
