"""Prefect flows: thin task wrappers around pipeline stages. No business logic lives here."""

import os

# No network at run time except the configured LLM endpoint: Prefect's server would phone home.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
