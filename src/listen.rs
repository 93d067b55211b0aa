//! Public TCP listeners with room for reconnect storms.
//!
//! tokio's `TcpListener::bind` asks for a backlog of 1 024 connections.
//! When thousands of clients come back at once (a network blip, a
//! deploy), connections beyond the backlog are dropped by the kernel and
//! each client waits out its SYN retransmission (1 s, then 3 s): in the
//! capacity bench, a burst of 5 000 MQTT clients saw some fail their 5 s
//! CONNACK timeout that way. The kernel caps the backlog at
//! `net.core.somaxconn` (4 096 on current kernels).

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel may hold for a listener before it accepts them.
pub const BACKLOG: u32 = 4096;

/// Binds `addr` (port 0 picks a free port) and listens with [`BACKLOG`].
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As tokio's own bind: a restarted sidecar rebinds its port while
    // connections of the previous one linger in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bound_listener_accepts() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, connected) =
            tokio::join!(listener.accept(), tokio::net::TcpStream::connect(addr));
        assert_eq!(
            accepted.unwrap().1,
            connected.unwrap().local_addr().unwrap()
        );
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error() {
        let first = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let taken = first.local_addr().unwrap();
        assert!(bind(taken).is_err());
    }
}
