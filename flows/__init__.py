"""Prefect flows: thin task wrappers around pipeline stages. No business logic lives here."""
