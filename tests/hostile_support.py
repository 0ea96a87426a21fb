"""A hostile hw01 submission that looks for the checks' reference code on disk.

Its first cell walks the whole file system the student process sees (every mounted
folder, ``sys.prefix`` and ``sys.path`` among them) for a folder holding the reference
module and ``hw01``'s checks (as source or as compiled ``__pycache__`` files) and loads
it with ``importlib.util.spec_from_file_location``; no string of the cell names the
reference code as the source gate knows it.  Its answers to q1 and q2 call what it
loaded.  Where nothing is found the cell raises ``REFERENCE_NOT_FOUND``, so the
report says the walk came back empty.
"""

from __future__ import annotations

REFERENCE_NOT_FOUND = "walked every folder: no reference code"

WALKER = (
    '''import importlib.util, os, sys
def _look():
    tops = ["/", sys.prefix, *[p for p in sys.path if p]]
    seen = set()
    for top in tops:
        for here, folders, files in os.walk(top):
            if here in seen:
                folders[:] = []
                continue
            seen.add(here)
            if here == "/":
                folders[:] = [f for f in folders if f not in ("proc", "sys", "dev")]
            names = set(files)
            if {"com" + "mon.py", "hw" + "01.py"} <= names:
                return os.path.join(here, "com" + "mon.py")
            pyc = sorted(f for f in files if f.startswith("com" + "mon.") and f.endswith(".pyc"))
            if pyc and any(f.startswith("hw" + "01.") for f in files):
                return os.path.join(here, pyc[0])
    return None
_found = _look()
if _found is None:
    raise FileNotFoundError("'''
    + REFERENCE_NOT_FOUND
    + """")
_spec = importlib.util.spec_from_file_location("borrowed", _found)
_borrowed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_borrowed)
"""
)
STATES = """def rnn_states(W, U, inputs):
    return getattr(_borrowed, "tanh_" + "rnn_states")(W, U, inputs)
"""
TRUNCATED = """def truncated_rnn_states(W, U, inputs, k):
    return getattr(_borrowed, "tanh_" + "truncated_states")(W, U, inputs, k)
"""


def walker_notebook(stub):
    """The hw01 student edition ``stub`` with the walker cell and the borrowed answers
    to q1 and q2 (q3 stays the stub: a control scores 0)."""
    import nbformat

    from stablernn_lib.homework.cells import is_solution_cell, question_of

    nb = nbformat.from_dict(dict(stub))
    cells = []
    for cell in nb.cells:
        if is_solution_cell(cell) and question_of(cell) == "hw01.q1":
            cells.append(nbformat.v4.new_code_cell(WALKER))
            cell = nbformat.from_dict({**cell, "source": STATES})
        elif is_solution_cell(cell) and question_of(cell) == "hw01.q2":
            cell = nbformat.from_dict({**cell, "source": TRUNCATED})
        cells.append(cell)
    nb.cells = cells
    return nb
