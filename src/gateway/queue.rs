//! The channel under a connection's outbound queue (see [`super::outbound`]):
//! unbounded (the queue's account bounds it), any number of senders, one
//! receiver.
//!
//! tokio's unbounded channel allocated some 1.3 KiB per connection up
//! front (its shared state, cache-padded, and a first block of 32 slots),
//! which every idle consumer kept. This one holds a lock, a counter and a
//! wake-up; its slots are allocated while something is queued and given
//! back once the receiver has emptied them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Something was queued, or the last sender left.
    queued: Notify,
}

struct State<T> {
    items: VecDeque<T>,
    senders: usize,
    /// The receiver closed or left: sends fail.
    closed: bool,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Nothing panics while holding it; a poisoned state is still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Sender<T>(Arc<Shared<T>>);

pub struct Receiver<T>(Arc<Shared<T>>);

pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            senders: 1,
            closed: false,
        }),
        queued: Notify::new(),
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queues `item`; gives it back when the receiver has closed.
    pub fn send(&self, item: T) -> Result<(), T> {
        let mut state = self.0.lock();
        if state.closed {
            return Err(item);
        }
        state.items.push_back(item);
        drop(state);
        self.0.queued.notify_one();
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.lock().senders += 1;
        Sender(self.0.clone())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.senders -= 1;
        let last = state.senders == 0;
        drop(state);
        if last {
            self.0.queued.notify_one();
        }
    }
}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("queue::Sender")
    }
}

impl<T> Receiver<T> {
    /// The next item, once there is one; `None` once every sender has left
    /// and nothing is queued. Cancel-safe: an item is only taken by the
    /// call that returns it.
    pub async fn recv(&mut self) -> Option<T> {
        loop {
            match self.take() {
                Ok(item) => return Some(item),
                Err(true) => return None,
                // A send after this look stored its wake-up (one receiver).
                Err(false) => self.0.queued.notified().await,
            }
        }
    }

    /// The next item if one is queued.
    pub fn try_recv(&mut self) -> Option<T> {
        self.take().ok()
    }

    /// The next item, or whether every sender has left.
    fn take(&mut self) -> Result<T, bool> {
        let mut state = self.0.lock();
        match state.items.pop_front() {
            Some(item) => {
                if state.items.is_empty() {
                    // An idle connection holds no slots.
                    state.items = VecDeque::new();
                }
                Ok(item)
            }
            None => Err(state.senders == 0),
        }
    }

    /// Sends fail from now on; what is queued can still be taken.
    pub fn close(&mut self) {
        self.0.lock().closed = true;
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn items_come_in_order_until_the_last_sender_leaves() {
        let (tx, mut rx) = unbounded();
        let second = tx.clone();
        tx.send(1).unwrap();
        second.send(2).unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.try_recv(), Some(2));
        assert_eq!(rx.try_recv(), None);
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        drop(second);
        assert_eq!(waiting.await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_for_a_send() {
        let (tx, mut rx) = unbounded();
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        tx.send("x").unwrap();
        assert_eq!(waiting.await.unwrap(), Some("x"));
    }

    #[test]
    fn sends_fail_once_the_receiver_closed() {
        let (tx, mut rx) = unbounded();
        tx.send(1).unwrap();
        rx.close();
        assert_eq!(tx.send(2), Err(2));
        assert_eq!(rx.try_recv(), Some(1));
        drop(rx);
        assert_eq!(tx.send(3), Err(3));
    }
}
