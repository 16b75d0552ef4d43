"""A fabric spread over several servers with Mininet's cluster edition: the cluster file, where each node runs,
the agents that own a run's changes on each server, tunnels, shaping and PFC across servers."""
