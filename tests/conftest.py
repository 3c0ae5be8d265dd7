"""Shared fixtures: tiny models and the location of the Multi30k data (read at run time, never copied)."""

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("VASWANI_MULTI30K_DIR", REPO.parent / "shared" / "data" / "multi30k"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def tiny_config(**overrides):
    from vaswani_hf import VaswaniConfig

    settings = dict(vocab_size=64, d_model=32, d_ff=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                    max_position_embeddings=128, dropout=0.0)
    settings.update(overrides)
    return VaswaniConfig(**settings)


def randomize_norms_and_biases(model):
    """Random LayerNorm gains/biases and linear biases, so that equivalence tests exercise every tensor."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.normal_(0.0, 0.5)
    return model


@pytest.fixture
def tiny_model():
    from vaswani_hf import VaswaniForConditionalGeneration

    torch.manual_seed(0)
    return VaswaniForConditionalGeneration(tiny_config()).eval()


def padded_batch(lengths, vocab_size=64, pad=0, eos=2, seed=0):
    """Right-padded source ids ending in </s>, with their attention mask: (B, max(lengths))."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, : n - 1] = torch.randint(4, vocab_size, (n - 1,), generator=g)
        ids[row, n - 1] = eos
    return ids, (ids != pad).long()


BLOCK_PACKAGE = '''
import sys
class _BlockVaswani:
    """Make `import vaswani_hf` fail, as on a machine where the package is not installed."""
    def find_spec(self, name, path=None, target=None):
        if name == "vaswani_hf" or name.startswith("vaswani_hf."):
            raise ImportError("vaswani_hf is blocked in this process")
        return None
sys.meta_path.insert(0, _BlockVaswani())
sys.path = [p for p in sys.path if p not in ("", ".")]
'''


def run_python(code: str, cwd, env=None, block_package=False, timeout=300):
    """Run `code` in a fresh interpreter (optionally unable to import vaswani_hf); return stdout, fail on error."""
    import subprocess
    import sys

    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    source = (BLOCK_PACKAGE if block_package else "") + code
    result = subprocess.run([sys.executable, "-c", source], cwd=str(cwd), env=full_env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"subprocess failed:\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr[-4000:]}"
    return result.stdout
