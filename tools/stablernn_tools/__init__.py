"""Maintainers' tools of the course: book checks, Colab, benchmarks (not for students)."""
