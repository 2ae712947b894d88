"""The pure parts of the query stage: plan, option types, facts, sources and gates."""
