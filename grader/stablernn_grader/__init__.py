"""Grader of the course: grades homework notebooks in a sandbox (for instructors)."""
