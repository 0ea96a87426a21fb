"""stablernn_lib: the library behind the course "Stable Recurrent Models".

Recurrent models are written as explicit state maps ``state' = phi_w(state, x)``
so that the course can truncate them, measure their contractivity, project them
onto the stable set, and compare them with their feed-forward (truncated) versions.
"""

__version__ = "0.1.0"
