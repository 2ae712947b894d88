"""Stages 1 and 2: who the persona is. Seeds are sampled or read (``sample_personas``), then the model writes
the profile and the per-topic item inventory, checked and topped up by code (``expand_persona``)."""
