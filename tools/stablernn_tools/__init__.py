"""Maintainers' tools of the course: book checks, Colab conversion, benchmarks (not for students)."""
