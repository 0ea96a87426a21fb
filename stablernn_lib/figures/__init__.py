"""Layer 5, the chapters' figures, tables and widgets: they read results and call the layers
below; nothing below imports them."""
