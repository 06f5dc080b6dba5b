"""The notebooks run top to bottom in a fresh kernel, never reach the network, are committed without
outputs, and show the figures a hand derivation gives (written here, independent of the engine).

``pytest --nbmake notebooks`` runs them too; this test adds the network guard and the checks."""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# Prepended (in memory only) to every notebook: any attempt to resolve a name or open an internet
# socket fails the run. The kernel's own channels are ZeroMQ sockets opened before this cell runs.
NETWORK_GUARD = """\
import socket as _socket

def _no_network(*args, **kwargs):
    raise RuntimeError("a notebook tried to reach the network")

_socket.getaddrinfo = _socket.create_connection = _no_network
_socket.socket.connect = _socket.socket.connect_ex = _no_network
"""

P_7B = 7_000_000_000
KEEP_16BIT_70B = 2 * 32000 * 8192 + 80 * 2 * 8192 + 8192   # embeddings, lm_head, norms: not quantized
LORA_PER_LAYER_R64 = 4 * 64 * (4096 + 4096) + 2 * 64 * (4096 + 11008) + 64 * (11008 + 4096)   # q k v o; gate up; down

EXPECTED = {
    "01_classic_7b.ipynb": [
        f"**12 B/param = {P_7B * (2 + 2 + 8) // 10**9} GB**",            # bf16 w + bf16 g + fp32 m, v
        f"**16 B/param = {P_7B * (2 + 2 + 4 + 8) // 10**9} GB**",        # + fp32 master
        f"difference: {P_7B * 4 // 10**9} GB",
        f"| **one layer** |  |  | **{LORA_PER_LAYER_R64:,}** |",
        f"32 layers × {LORA_PER_LAYER_R64:,} = {32 * LORA_PER_LAYER_R64:,} trainable parameters",
        f"r=16: {32 * LORA_PER_LAYER_R64 // 4:,} trainable parameters",
        "UserError: fp16 trainable weights need --master fp32",
        "| QLoRA |",
    ],
    "02_whatif_sensitivity.ipynb": [
        # rank 64 -> 16: a quarter of the adapters, each with 2 + 2 + 8 bytes (adapter, gradient, m and v)
        f"trainable block: {(32 * LORA_PER_LAYER_R64 // 4 - 32 * LORA_PER_LAYER_R64) * 12:,} bytes",
        f"full fine-tuning, optimizer states: {P_7B * 2 * (1 - 4):,} bytes",     # m, v: 4 -> 1 byte each
        "rank appears in its own derivative: False",                            # r(d_in + d_out): linear
        "∂peak/∂bytes_weight = P",                                              # base weights P·β_w
        "budget: 23.50 GiB",                       # RTX 4090: 23.5 GiB usable (data/gpus.toml), no margin (--headroom 0)
    ],
    "03_70b_multi_gpu.ipynb": [
        "full fine-tuning, parameter side: 840 GB (12 bytes per parameter)",     # 70·10⁹ × 12 B
        "LoRA base weights: 140 GB",                                             # 70·10⁹ × 2 B
        f"QLoRA NF4 weights: {(70 * 10**9 - KEEP_16BIT_70B) // 2:,} bytes",      # 4 bits per quantized weight
        # ZeRO paper: stage 1 splits the optimizer states over N, stage 3 also the weights
        r"M_{\mathrm{train}} = P \cdot \beta_{g} + \frac{P \cdot \beta_{o} \cdot n_{o}}{N}",
        r"M_{\mathrm{base}} = \frac{P \cdot \beta_{w}}{N}",
        "QLoRA with checkpointing: 1 × NVIDIA A100 80GB with DDP",               # the reference: one 80 GB card
    ],
}
IMAGES = {"01_classic_7b.ipynb": 0, "02_whatif_sensitivity.ipynb": 3, "03_70b_multi_gpu.ipynb": 1}


def notebook_paths():
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.extend(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)


def test_every_notebook_has_expectations():
    assert [p.name for p in notebook_paths()] == sorted(EXPECTED) == sorted(IMAGES)


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.name)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", notebook_paths(), ids=lambda p: p.name)
def test_notebook_runs_offline_and_shows_the_derivation(path):
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(NETWORK_GUARD))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = outputs_text(nb)
    for expected in EXPECTED[path.name]:
        assert expected in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == IMAGES[path.name]
