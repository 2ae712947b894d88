"""Stage 3, pure code: what happens to the persona. The causal DAG of life events and the versioned
preferences they change (``simulate_timeline``), laid out in simulated time (``periods``)."""
