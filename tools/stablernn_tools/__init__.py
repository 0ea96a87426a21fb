"""Maintainers' tools of the course: book checks, Colab conversion, student edition,
mutation reports, benchmarks (not for students)."""
