"""Typed data model of personagen: pydantic models and the pyarrow schema of every output table.

No I/O and no model calls live here; see DESIGN.md's data model.
"""
