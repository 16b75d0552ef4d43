"""RoCEv2's own transport, pure parts: frames (BTH, AETH, CNP, ICRC) and a queue pair's go-back-N."""
