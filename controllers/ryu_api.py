"""The Ryu application API, from os-ken (default) or Ryu 4.34 (when only it is installed).

Both expose the same modules under different package names; the app imports
everything it needs from here so it loads under either.
"""

from __future__ import annotations

try:
    from os_ken.base import app_manager
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib.packet import arp, ether_types, ethernet, lldp, packet
    from os_ken.ofproto import nicira_ext, ofproto_v1_3

    BaseApp = app_manager.OSKenApp
    FRAMEWORK = "os-ken"
except ImportError:  # pragma: no cover - exercised only where Ryu is installed instead
    from ryu.base import app_manager  # type: ignore[no-redef]
    from ryu.controller import ofp_event  # type: ignore[no-redef]
    from ryu.controller.handler import CONFIG_DISPATCHER, DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # type: ignore[no-redef]
    from ryu.lib.packet import arp, ether_types, ethernet, lldp, packet  # type: ignore[no-redef]
    from ryu.ofproto import nicira_ext, ofproto_v1_3  # type: ignore[no-redef]

    BaseApp = app_manager.RyuApp
    FRAMEWORK = "ryu"



def _end_send_loop_with_receive_loop() -> None:
    """os-ken 4.x with native threads: a closed switch connection never reached DEAD_DISPATCHER.

    Datapath.serve() ends its receive loop, then joins its send loop, which
    waits on its queue forever (hub.kill is a no-op for native threads). So
    the app never heard of the disconnect and two threads leaked per
    connection. When the receive loop ends, this closes the datapath at once
    (DEAD_DISPATCHER reaches the app then, not one echo interval later) and
    queues one empty, closing send so the send loop finishes and serve()
    returns. Wraps the method rather than copying os-ken code.
    """
    if FRAMEWORK != "os-ken":
        return
    import functools

    from os_ken.controller import controller
    from os_ken.lib import hub

    recv = controller.Datapath._recv_loop
    if hub.HUB_TYPE != "native" or getattr(recv, "_hpnlab_wakes_send_loop", False):
        return

    @functools.wraps(recv)
    def _recv_loop(self):
        try:
            recv(self)
        finally:
            self.close()
            self.send(b"", close_socket=True)

    _recv_loop._hpnlab_wakes_send_loop = True
    controller.Datapath._recv_loop = _recv_loop


_end_send_loop_with_receive_loop()

__all__ = ["BaseApp", "CONFIG_DISPATCHER", "DEAD_DISPATCHER", "FRAMEWORK", "MAIN_DISPATCHER", "app_manager", "arp",
           "ether_types", "ethernet", "lldp", "nicira_ext", "ofp_event", "ofproto_v1_3", "packet",
           "set_ev_cls"]
