//! What an idle WebSocket consumer's task holds.

use std::future::Future;

use tokio::net::TcpStream;

use super::*;

fn future_size<A, F: Future>(_: impl FnOnce(A) -> F) -> usize {
    std::mem::size_of::<F>()
}

/// Every idle consumer's task is mostly this future (issue 48: 4 480
/// bytes in a release build before, the connection held twice and a
/// frame's handling inline; see docs/benchmarks.md § Capacity).
#[test]
fn a_connection_task_stays_small() {
    let run = future_size(Connection::<TcpStream>::run);
    let connection = std::mem::size_of::<Connection<TcpStream>>();
    eprintln!("Connection::run: {run} bytes; the connection (boxed): {connection} bytes");
    assert!(run <= 1_600, "{run} bytes");
}
