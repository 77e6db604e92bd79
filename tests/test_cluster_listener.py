"""commlib.cluster.listener: no local client, however it behaves, stops the next run()."""

import os
import socket
import struct
import sys

import cloudpickle
import torch.distributed as dist

import commlib as cl

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_garbage_reset_silent_slow_and_half_open_clients_never_stop_the_next_run():
    with cl.Cluster(world_size=2, timeout=10, start_timeout=10) as c:
        address = c._state.listener.address
        strangers = [socket.create_connection(address)]                  # connects, says nothing
        strangers.append(socket.create_connection(address))
        strangers[-1].sendall(b"\x00\x00")                                 # half a length header, then silence
        strangers.append(socket.create_connection(address))
        strangers[-1].shutdown(socket.SHUT_WR)                             # half-open
        for _ in range(3):
            with socket.create_connection(address) as garbage:
                garbage.sendall(b"\xff\xff\xff\xff" + os.urandom(60))      # not a handshake
            reset = socket.create_connection(address)
            reset.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            reset.close()                                                  # RST instead of FIN
        try:
            for _ in range(2):  # every restart's ranks must get through while the strangers hang on
                c.restart()
                assert c.run(dist.get_rank) == [0, 1]
        finally:
            for s in strangers:
                s.close()
