"""Failure campaigns as operators see them (pure: no Mininet, no root).

- `model`: how often each kind of component fails (a monthly probability per component, from published
  production figures where there are some) and how long its repair takes; a seeded sample of a fabric's
  outages over months.
- `cost`: what each outage cost a training job, from what the emulation measured around it (stall,
  slowdown, reroute) and the job's watchdog, restart cost and checkpoint interval; the campaign's summary
  (interruptions per month, goodput, lost GPU-hours).
"""
