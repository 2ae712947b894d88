"""`personagen eval`: PersonaMem's multiple-choice protocol, answer parsing and the summary."""
