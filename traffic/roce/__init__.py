"""RoCEv2's own transport, pure parts: frames (BTH, AETH, CNP, ICRC), a queue pair's go-back-N, and DCQCN's
reaction point."""
