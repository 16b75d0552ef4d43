"""A fabric spread over several servers with Mininet's cluster edition (issue #18): the cluster file, where
each node runs. (Started: the spec and the placement; the remote build, tunnels and cleanup come next.)"""
