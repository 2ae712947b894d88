"""Checks of model-written text that every stage applies: readable, on its item and topic (``quality``) and
true to its labelled stance (``stance``)."""
