"""Where each configured period lies in simulated time: when its events happen and its sessions occur."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from schemas.config import RunConfig

BACKGROUND_DAYS = 365


class PeriodWindow(BaseModel):
    """Events of a period happen in [events_start, events_end); its sessions in [at, sessions_end)."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str
    at: datetime
    sessions_end: datetime
    events_start: datetime
    events_end: datetime


def history_start(config: RunConfig) -> datetime:
    """When initial preferences start to hold: before every background event."""
    return config.start_date - timedelta(days=BACKGROUND_DAYS + 30)


def period_windows(config: RunConfig) -> list[PeriodWindow]:
    """One window per period. Period 0's events are background life before the first conversations."""
    ats = [config.start_date + timedelta(days=p.offset_days) for p in config.periods]
    nexts = ats[1:] + [ats[-1] + timedelta(days=config.timeline.last_period_days)]
    windows: list[PeriodWindow] = []
    for i, (period, at, nxt) in enumerate(zip(config.periods, ats, nexts, strict=True)):
        sessions_end = at + min(timedelta(days=2), (nxt - at) / 8)
        if i == 0:
            ev_start, ev_end = at - timedelta(days=BACKGROUND_DAYS), at - timedelta(days=1)
        else:
            ev_start, ev_end = windows[-1].sessions_end + timedelta(hours=1), at - timedelta(hours=1)
        windows.append(
            PeriodWindow(
                index=i, name=period.name, at=at, sessions_end=sessions_end, events_start=ev_start, events_end=ev_end
            )
        )
    return windows
