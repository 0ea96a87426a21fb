"""stablernn_lib: the library behind the course "Stable Recurrent Models".

Recurrent models as state maps ``state' = phi_w(state, x)``: truncated, measured for
contractivity, projected onto the stable set, compared with their feed-forward versions.
"""

__version__ = "0.1.0"
