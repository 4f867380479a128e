//! Low-water-mark receive: `setRcvlowat`, `recvAtLeast`.
