"""Homework for every chapter: questions, autograded checks, student editions, grading.

In a homework notebook, after each solution cell::

    from stablernn_lib.homework import check
    check("hw04.q1", spectral_projection)

prints which visible checks passed and why the others failed.  Instructors use
``python -m stablernn_lib homework student-edition|grade|questions`` (see ``cli``).
"""

from stablernn_lib.homework.registry import get_homework, get_question, homeworks
from stablernn_lib.homework.runner import check

__all__ = ["check", "get_homework", "get_question", "homeworks"]
