"""Routing, hashing, precise placement and scheduling (pure), and the OpenFlow controller app on the Ryu API with
its REST server."""
