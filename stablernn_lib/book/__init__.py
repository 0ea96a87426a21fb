"""Layer 6, the book's tooling: notebook checks, the Sphinx extension, Colab conversion,
notebook times, citations. Imports the layers below; never ``homework``."""
