"""JSB Chorales polyphonic music models (Chapter 9): the piano rolls, training, analysis."""
