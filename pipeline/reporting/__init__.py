"""Looking at a dataset: the HTML report and its plots, the terminal summary, one persona's timeline."""
