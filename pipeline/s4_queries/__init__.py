"""Stage 6: the queries. The driver (``generate_queries``) and its pure parts: plan, option types, facts,
sources, gates of the wording, the balance of option sets, and the option-only probes and filter that gate
publishing (``probe``, ``relational``, ``filtering``)."""
