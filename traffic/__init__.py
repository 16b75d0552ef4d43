"""Collective schedules, workloads and iterations (pure), and the agents and transports that move them between
the hosts."""
