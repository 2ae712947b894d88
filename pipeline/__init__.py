"""personagen's stages and shared seams (llm, prompting, tokens, dataset)."""

__version__ = "0.1.0"
