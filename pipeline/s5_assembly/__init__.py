"""Stage 7, pure code: histories at each token budget. The token rule (``budget``), what the harnesses send
(``fit``), the orderings, filler and question placements (``assemble_contexts``)."""
