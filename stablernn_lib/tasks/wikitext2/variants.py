"""The four WikiText-2 models of the paper's table: a cell (``rnn``, ``lstm``) with or
without the stability projection, and the names and labels the results and figures use."""

MODEL_LABELS = {"rnn": "RNN (tanh)", "lstm": "LSTM"}
MODEL_VARIANTS: tuple[tuple[str, bool], ...] = (
    ("rnn", False),
    ("rnn", True),
    ("lstm", False),
    ("lstm", True),
)


def variant_name(cell: str, stable: bool) -> str:
    """``"rnn-stable"``, ``"lstm-unconstrained"``, ...: the name of a model in results and runs."""
    return f"{cell}-{'stable' if stable else 'unconstrained'}"


VARIANTS_BY_NAME = {variant_name(cell, stable): (cell, stable) for cell, stable in MODEL_VARIANTS}
