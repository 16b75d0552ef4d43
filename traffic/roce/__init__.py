"""RoCEv2's own transport, pure parts: frames (BTH, AETH, CNP, ICRC), a queue pair's go-back-N and send queue,
and DCQCN's reaction and notification points."""
