"""The fast projections of the training step (issue 24) against the exact ones.

The spectral projection of the stable RNN takes, for CUDA weights, the eigendecomposition
of ``W^T W`` on the host CPU instead of an SVD on the GPU; the authors' LSTM rescaling is
written without loops over the gates.  Both must give the exact result up to rounding.
"""

from __future__ import annotations

import pytest
import torch

from stablernn_lib.core.contraction import project_spectral_ball, project_spectral_ball_by_eigh
from stablernn_lib.tasks.wikitext2 import model as lm
from stablernn_lib.theory import lstm_certificate as ls

TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-10}


def with_singular_values(values: list[float], generator: torch.Generator) -> torch.Tensor:
    """``Q1 diag(values) Q2^T`` in float64, with random orthogonal ``Q1, Q2``."""
    n = len(values)
    q1, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    return (q1 * torch.tensor(values, dtype=torch.float64)) @ q2.T


def exact_projection(matrix: torch.Tensor) -> torch.Tensor:
    """The reference: the SVD of the float64 matrix, singular values clipped at 1."""
    u, s, vh = torch.linalg.svd(matrix.double())
    return (u * s.clamp(max=1.0)) @ vh


def sample_matrices(generator: torch.Generator) -> torch.Tensor:
    """Three 24 x 24 matrices: values above, below and exactly at 1, and a clipped one."""
    spread = [0.05 * k for k in range(1, 25)]  # 0.05 .. 1.2: below, at 1.0, above
    clipped = [1.0] * 12 + [1.0 + 1e-4 * k for k in range(6)] + [0.3] * 6  # after a step
    inside = [0.9 * k / 24 for k in range(1, 25)]
    return torch.stack([with_singular_values(v, generator) for v in (spread, clipped, inside)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eigh_projection_equals_the_svd_projection(generator, dtype) -> None:
    matrices = sample_matrices(generator).to(dtype)
    batched = project_spectral_ball_by_eigh(matrices, 1.0, dtype)  # computed in dtype
    assert batched.dtype == dtype
    for n, matrix in enumerate(matrices):
        expected = exact_projection(matrix)
        torch.testing.assert_close(batched[n].double(), expected, atol=TOLERANCE[dtype], rtol=0)
        single = project_spectral_ball_by_eigh(matrix, 1.0, dtype)  # per layer = batched
        torch.testing.assert_close(single, batched[n], atol=TOLERANCE[dtype], rtol=0)
        clipped = torch.linalg.svdvals(batched[n].double())
        wanted = torch.linalg.svdvals(matrix.double()).clamp(max=1.0)
        torch.testing.assert_close(clipped, wanted, atol=10 * TOLERANCE[dtype], rtol=0)


def test_rectangular_matrices_project_alike(generator) -> None:
    for shape in ((2, 7, 12), (2, 12, 7)):
        matrices = 2 * torch.randn(*shape, generator=generator, dtype=torch.float64)
        got = project_spectral_ball_by_eigh(matrices, 1.0)
        torch.testing.assert_close(got, project_spectral_ball(matrices, 1.0), atol=1e-10, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_path_of_the_layer_stack_equals_the_exact_projection(
    generator, dtype, monkeypatch
) -> None:
    """The host-eigh path (taken for CUDA weights) run on the CPU, against the SVD path."""
    matrices = sample_matrices(generator).to(dtype)
    exact = [m.clone() for m in matrices]
    lm.project_spectral_balls_(exact)  # CPU weights: the SVD in their dtype
    monkeypatch.setattr(lm, "spectral_solver", lambda m: (m.device, "eigh"))
    fast = [m.clone() for m in matrices]
    lm.project_spectral_balls_(fast)
    for got, reference, original in zip(fast, exact, matrices, strict=True):
        torch.testing.assert_close(got, reference, atol=10 * TOLERANCE[dtype], rtol=0)
        torch.testing.assert_close(
            got.double(), exact_projection(original), atol=TOLERANCE[dtype], rtol=0
        )


def test_fast_path_skips_only_matrices_proved_inside(generator, monkeypatch) -> None:
    monkeypatch.setattr(lm, "spectral_solver", lambda m: (m.device, "eigh"))
    matrices = sample_matrices(generator)
    weights = [m.clone() for m in matrices]
    lm.project_spectral_balls_(weights, check_first=True)
    assert torch.equal(weights[2], matrices[2])  # the inside one, left bit for bit
    for n in (0, 1):
        torch.testing.assert_close(weights[n], exact_projection(matrices[n]), atol=1e-10, rtol=0)


def test_fast_path_refuses_non_finite_weights(monkeypatch) -> None:
    monkeypatch.setattr(lm, "spectral_solver", lambda m: (m.device, "eigh"))
    weights = [torch.eye(4), torch.full((4, 4), float("nan"))]
    with pytest.raises(ValueError, match="NaN or infinite"):
        lm.project_spectral_balls_(weights)


def test_solver_choice_by_device_and_size() -> None:
    assert lm.spectral_solver(torch.zeros(2, 5, 5)) == (torch.device("cpu"), "svd")
    meta = torch.zeros(2, 200, 200, device="meta")  # stands for any non-CPU device
    assert lm.spectral_solver(meta)[1] == "svd"  # not CUDA: solved where it lives


def authors_reference_(weight_hh: torch.Tensor, weight_ih: torch.Tensor) -> None:
    """The authors' rule written block by block, as their code does."""
    blocks = ls.gate_blocks(weight_hh)
    for gate, c in ls.AUTHORS_RECURRENT_SCALES.items():
        blocks[gate].copy_(c * blocks[gate] / blocks[gate].abs().sum(dim=0))
    forget = ls.gate_blocks(weight_ih)["f"]
    forget.copy_(ls.AUTHORS_INPUT_FORGET_SCALE * forget / forget.abs().sum(dim=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vectorized_authors_rescaling_equals_the_blockwise_rule(generator, dtype) -> None:
    hidden, inputs = 9, 5
    weight_hh = torch.randn(4 * hidden, hidden, generator=generator, dtype=dtype)
    weight_ih = torch.randn(4 * hidden, inputs, generator=generator, dtype=dtype)
    expected_hh, expected_ih = weight_hh.clone(), weight_ih.clone()
    authors_reference_(expected_hh, expected_ih)
    ls.authors_lstm_rescaling_(weight_hh, weight_ih)
    torch.testing.assert_close(weight_hh, expected_hh, atol=TOLERANCE[dtype], rtol=0)
    torch.testing.assert_close(weight_ih, expected_ih, atol=TOLERANCE[dtype], rtol=0)


def test_authors_rescaling_of_a_language_model_touches_the_chosen_layers() -> None:
    torch.manual_seed(0)
    model = lm.WordLanguageModel("lstm", 30, 6, 6, num_layers=2, projected_layers=1)
    with torch.no_grad():
        model.encoder.weight.mul_(50)
    second = model.rnn.weight_hh_l1.detach().clone()
    lm.rescale_authors_lstm_(model)
    assert model.encoder.weight.abs().max() <= 1.0
    column_sums = model.rnn.weight_hh_l0.detach().view(4, 6, 6).abs().sum(dim=1)
    scales = torch.tensor([ls.AUTHORS_RECURRENT_SCALES[g] for g in ls.GATES])
    torch.testing.assert_close(column_sums, scales[:, None].expand(4, 6))
    assert torch.equal(model.rnn.weight_hh_l1.detach(), second)  # layer 2 is free
    with pytest.raises(ValueError, match="for LSTMs"):
        lm.rescale_authors_lstm_(lm.WordLanguageModel("rnn", 30, 6, 6))


def test_authors_rescaling_on_cpu_still_rejects_zero_columns() -> None:
    weight_hh, weight_ih = torch.randn(8, 2), torch.randn(8, 3)
    weight_ih[2:4, 1] = 0  # a zero column of U_f
    with pytest.raises(ValueError, match="U_f has a zero column"):
        ls.authors_lstm_rescaling_(weight_hh, weight_ih)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")
def test_cuda_fast_paths_equal_the_exact_projections(generator) -> None:
    device = torch.device("cuda")
    matrices = sample_matrices(generator).float()
    weights = [m.to(device) for m in matrices]
    assert lm.spectral_solver(torch.stack(weights)) == (torch.device("cpu"), "eigh")
    lm.project_spectral_balls_(weights)
    for got, original in zip(weights, matrices, strict=True):
        assert got.device.type == "cuda"
        torch.testing.assert_close(
            got.cpu().double(), exact_projection(original), atol=TOLERANCE[torch.float32], rtol=0
        )
    model = lm.WordLanguageModel("lstm", 30, 6, 6, num_layers=2)
    reference = lm.WordLanguageModel("lstm", 30, 6, 6, num_layers=2)
    reference.load_state_dict(model.state_dict())
    model.to(device)
    lm.rescale_authors_lstm_(model)
    lm.rescale_authors_lstm_(reference)
    for (name, got), expected in zip(
        model.state_dict().items(), reference.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(got.cpu(), expected, atol=1e-6, rtol=0, msg=name)


def test_chapter8_reading_of_the_committed_step_ratios_holds() -> None:
    """Every number Chapter 8's evidence page states about the two committed ratio files,
    from the files (the page glues ``chapter8_numbers``)."""
    import json
    from pathlib import Path

    from stablernn_lib.tasks.wikitext2.results import benchmark_numbers

    root = Path(__file__).resolve().parents[1]
    folder = root / "data" / "results" / "wikitext2"
    gpu = json.loads((folder / "benchmark-full-gpu-ratios.json").read_text())
    cpu = json.loads((folder / "benchmark-cpu-cpu-ratios.json").read_text())
    path = root / "chapters" / "08b_wikitext2_evidence.ipynb"
    text = " ".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    numbers = benchmark_numbers()
    assert gpu["provenance"]["device"] == numbers["gpu_device"] == "NVIDIA H200"
    assert gpu["config"] == "full"
    ratios, steps = gpu["ratios"], gpu["step_seconds"]
    assert numbers["gpu_course_ratio"] == pytest.approx(ratios["lstm-course / lstm-unconstrained"])
    authors = ratios["lstm-authors / lstm-unconstrained"]
    assert numbers["gpu_authors_ratio"] == pytest.approx(authors) and abs(authors - 1) < 0.02
    assert numbers["gpu_rnn_ratio"] == pytest.approx(ratios["rnn-stable / rnn-unconstrained"])
    projection = gpu["solver_seconds"]["fast_path"]
    assert numbers["gpu_projection_ms"] == pytest.approx(1000 * projection)
    assert 1.7 < projection / steps["rnn-unconstrained"] < 2.3  # "twice the whole step"
    assert numbers["gpu_rnn_step_ms"] == pytest.approx(1000 * steps["rnn-unconstrained"])
    assert numbers["gpu_eigh_ms"] == pytest.approx(
        1000 * gpu["solver_seconds"]["host_eigh_float32"]
    )
    assert numbers["gpu_target_ratio"] == gpu["target_ratio_on_gpu"]
    svd = ratios["rnn-stable-svd-on-device / rnn-unconstrained"]
    assert numbers["gpu_svd_ratio"] == pytest.approx(svd)
    assert gpu["solver_seconds"]["device_svd_float32"] > projection  # "slower still"
    assert numbers["cpu_rnn_step_ms"] == pytest.approx(
        1000 * cpu["step_seconds"]["rnn-unconstrained"]
    )
    assert numbers["cpu_rnn_ratio"] == pytest.approx(
        cpu["ratios"]["rnn-stable / rnn-unconstrained"]
    )
    for key in ("gpu_course_ratio:.2f", "gpu_projection_ms:.1f", "gpu_eigh_ms:.1f",
                "gpu_svd_ratio:.2f", "cpu_rnn_ratio:.2f"):  # fmt: skip
        assert f"{{glue:text}}`{key}`" in text, key
