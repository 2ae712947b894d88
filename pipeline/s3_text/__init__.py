"""Stages 4 and 5: the history's text. Event narratives and reasons (``narrate_events``), the sessions and the
facts each voices (``beats``), their turns (``write_sessions``, the small model's ``turn_mode``) and the filler."""
