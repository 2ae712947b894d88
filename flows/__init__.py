"""Prefect flows: thin task wrappers around pipeline stages. No business logic lives here."""

import os

# No network at run time except the configured LLM endpoint: Prefect's server would phone home.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The temporary server takes 15-30 s to start on 2 cores, more on a loaded machine; Prefect's default wait
# of 20 s then failed the run before any work (seen with a test suite running beside it).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
