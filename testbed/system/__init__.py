"""What this machine can do (capability probe) and what the testbed changed on it (ownership records).

The lowest layer of the system side: net/, qos/ and everything above use it; it uses none of them.
"""
