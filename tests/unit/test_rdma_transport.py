"""The rdma transport's pure parts: source ports from flow labels, message splitting, perftest output."""

import pytest

from traffic.transports.rdma import MIN_ITERS, flow_label_for, parse_perftest, split_bytes, udp_sport

# ib_write_bw --report_gbits, client side (perftest 24.x as packaged in Debian trixie)
PERFTEST_OUT = """
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : rxe-h1-eth0
 Number of qps   : 1            Transport type : IB
 local address: LID 0000 QPN 0x0011 PSN 0x3c1e5b RKey 0x0012f0 VAddr 0x007f5c1c7fe000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:01:00:01
 remote address: LID 0000 QPN 0x0011 PSN 0x8b2a1f RKey 0x001374 VAddr 0x007f88a47ff000
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      16               0.04               0.03               0.000061
---------------------------------------------------------------------------------------
"""


def test_flow_label_gives_the_declared_source_port():
    for sport in (0xC000, 0xC001, 0xD234, 0xFFFF):
        assert udp_sport(flow_label_for(sport)) == sport
    with pytest.raises(ValueError):
        flow_label_for(20000)  # below the RoCEv2 range: rxe could never use it


def test_source_port_without_flow_label_follows_the_kernel_hash():
    # rdma_calc_flow_label(17, 18) = 306 (no high bits to fold) -> 0xC000 | 306
    assert udp_sport(0, 17, 18) == 0xC000 | 306
    # high bits of the 20-bit label fold onto the low 14: label 0x4001 -> low 1 ^ 1 = 0
    assert udp_sport(0x4001) == 0xC000
    # all in range, whatever the queue pair numbers
    assert all(0xC000 <= udp_sport(0, a, b) <= 0xFFFF for a in range(17, 60, 7) for b in range(17, 5000, 331))


@pytest.mark.parametrize("nbytes", [1, 7, 4096, 1_000_003, 8 * 2**20, 3 * 2**20 + 12])
def test_split_moves_exactly_the_bytes_when_a_divisor_allows(nbytes):
    msg, iters = split_bytes(nbytes)
    assert iters >= MIN_ITERS and msg <= max(2**20, -(-nbytes // iters))
    if nbytes >= MIN_ITERS and any(nbytes % n == 0 for n in range(MIN_ITERS, MIN_ITERS + 4096)):
        assert msg * iters == nbytes
    else:
        assert nbytes <= msg * iters < nbytes + iters


def test_perftest_row_is_parsed():
    r = parse_perftest(PERFTEST_OUT)
    assert r == {"msg": 65536, "iters": 16, "peak_gbps": 0.04, "avg_gbps": 0.03}
    assert parse_perftest("Couldn't connect to 10.1.0.2:18515") is None
