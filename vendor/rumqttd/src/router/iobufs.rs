use std::{
    collections::{HashMap, VecDeque},
    sync::atomic::{AtomicBool, Ordering},
    sync::Arc,
    task::{Context, Poll},
};

use atomic_waker::AtomicWaker;

use flume::{Receiver, Sender};
use parking_lot::Mutex;
use tracing::{error, warn};

use crate::{
    protocol::{Packet, QoS},
    router::{FilterIdx, MAX_CHANNEL_CAPACITY},
    Cursor, Notification,
};

use super::Forward;

const MAX_INFLIGHT: usize = 100;
const MAX_PKID: u16 = MAX_INFLIGHT as u16;

#[derive(Debug)]
pub struct Incoming {
    /// Identifier associated with connected client
    pub(crate) client_id: String,
    /// Recv buffer
    pub(crate) buffer: Arc<Mutex<VecDeque<Packet>>>,
    // lmos-sidecar patch 36: no incoming meter (a map of every topic the
    // connection published to, which nothing read)
}

impl Incoming {
    #[inline]
    pub(crate) fn new(client_id: String) -> Self {
        Self {
            // lmos-sidecar patch: was `with_capacity(MAX_CHANNEL_CAPACITY)`.
            buffer: Arc::new(Mutex::new(VecDeque::new())),
            client_id,
        }
    }

    #[inline]
    pub(crate) fn buffer(&self) -> Arc<Mutex<VecDeque<Packet>>> {
        self.buffer.clone()
    }

    #[inline]
    pub(crate) fn exchange(&mut self, mut v: VecDeque<Packet>) -> VecDeque<Packet> {
        std::mem::swap(&mut v, &mut self.buffer.lock());
        v
    }
}

#[derive(Debug)]
pub struct Outgoing {
    /// Identifier associated with connected client
    pub(crate) client_id: String,
    /// Send buffer
    pub(crate) data_buffer: Arc<Mutex<VecDeque<Notification>>>,
    /// Handle which is given to router to allow router to communicate with this connection
    pub(crate) handle: Wakeup,
    /// The buffer to keep track of inflight packets.
    inflight_buffer: VecDeque<(u16, FilterIdx, Option<Cursor>)>,
    /// Last packet id
    last_pkid: u16,
    /// lmos-sidecar patch 37: what only QoS 2 and resumed sessions use,
    /// made when first needed (an idle subscriber's slot held 56 bytes of
    /// empty queues for it)
    seldom: Option<Box<Seldom>>,
    // lmos-sidecar patch 37: no outgoing meter (two counters nothing read);
    // patch 30's QoS 2 sends go to a list `push_forwards`'s caller gives it
}

/// lmos-sidecar patch 37: the part of [`Outgoing`] few connections use.
#[derive(Debug, Default)]
struct Seldom {
    /// PubRels waiting for PubComp
    unacked_pubrels: VecDeque<u16>,
    /// lmos-sidecar patch 29: publications a resumed session was sent
    /// before and had not acknowledged, by where they are in the log, with
    /// the packet identifier they were sent under (MQTT-4.4.0-1)
    resend: Vec<(u16, FilterIdx, Cursor)>,
}

/// lmos-sidecar patch 22: how the router tells a connection's link that it
/// left notifications in its buffer. A direct link is woken through a flag
/// and its waker: a channel, and the hook its wait left in it, cost every
/// idle direct link some 280 bytes.
#[derive(Debug)]
pub(crate) enum Wakeup {
    Channel(Sender<()>),
    Direct(Arc<DirectWake>),
}

impl Wakeup {
    pub(crate) fn try_send(&self, (): ()) -> Result<(), ()> {
        match self {
            Wakeup::Channel(tx) => tx.try_send(()).map_err(drop),
            Wakeup::Direct(wake) => {
                wake.wake();
                Ok(())
            }
        }
    }
}

/// The router has dropped the connection: as a channel whose sender is
/// gone.
impl Drop for Wakeup {
    fn drop(&mut self) {
        if let Wakeup::Direct(wake) = self {
            wake.closed.store(true, Ordering::Release);
            wake.waker.wake();
        }
    }
}

/// A direct link's side of [`Wakeup::Direct`].
#[derive(Debug, Default)]
pub struct DirectWake {
    woken: AtomicBool,
    closed: AtomicBool,
    waker: AtomicWaker,
}

impl DirectWake {
    /// The link has notifications to read.
    pub(crate) fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Ready once woken since it was last ready (several wake-ups make
    /// one); `Err` once the router has dropped the connection and nothing
    /// is left to read.
    pub(crate) fn poll(&self, cx: &mut Context<'_>) -> Poll<Result<(), ()>> {
        if let Some(ready) = self.ready() {
            return Poll::Ready(ready);
        }
        self.waker.register(cx.waker());
        match self.ready() {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    fn ready(&self) -> Option<Result<(), ()>> {
        if self.woken.swap(false, Ordering::AcqRel) {
            return Some(Ok(()));
        }
        self.closed.load(Ordering::Acquire).then_some(Err(()))
    }
}

impl Outgoing {
    /// lmos-sidecar patch 22: for a direct link, woken without a channel.
    pub(crate) fn direct(client_id: String) -> (Self, Arc<DirectWake>) {
        let wake = Arc::new(DirectWake::default());
        let outgoing = Self::with(client_id, Wakeup::Direct(wake.clone()));
        (outgoing, wake)
    }

    #[inline]
    pub(crate) fn new(client_id: String) -> (Self, Receiver<()>) {
        let (handle, rx) = flume::bounded(MAX_CHANNEL_CAPACITY);
        (Self::with(client_id, Wakeup::Channel(handle)), rx)
    }

    fn with(client_id: String, handle: Wakeup) -> Self {
        // lmos-sidecar patch: the buffers grow on demand; they were
        // allocated at their full capacity (200 notifications, 100 + 100
        // inflight entries, and 200 packets in `Incoming`) for every
        // connection, most of an idle MQTT client's memory.
        let data_buffer = VecDeque::new();
        let inflight_buffer = VecDeque::new();

        Self {
            client_id,
            data_buffer: Arc::new(Mutex::new(data_buffer)),
            inflight_buffer,
            handle,
            last_pkid: 0,
            seldom: None,
        }
    }

    fn seldom(&mut self) -> &mut Seldom {
        self.seldom.get_or_insert_with(Box::default)
    }

    #[inline]
    pub(crate) fn buffer(&self) -> Arc<Mutex<VecDeque<Notification>>> {
        self.data_buffer.clone()
    }

    pub fn free_slots(&self) -> usize {
        MAX_INFLIGHT - self.inflight_buffer.len()
    }

    pub fn push_notification(&mut self, notification: Notification) -> usize {
        let mut buffer = self.data_buffer.lock();
        buffer.push_back(notification);
        buffer.len()
    }

    /// Push packets to the outgoing buffer.
    ///
    /// lmos-sidecar patch 30, 37: QoS 2 publications sent from the log
    /// are added to `sent_qos2` with their packet identifiers, for the
    /// keeper of a kept session.
    pub fn push_forwards(
        &mut self,
        publishes: impl Iterator<Item = Forward>,
        filter_idx: usize,
        sent_qos2: &mut Vec<(u16, Cursor)>,
    ) -> (usize, usize) {
        let mut buffer = self.data_buffer.lock();

        for mut p in publishes {
            // lmos-sidecar patch: each publication goes at its own QoS (the
            // lower of its publisher's and the subscription's), so a QoS 0
            // one on a QoS 1 subscription takes no packet identifier and
            // waits for no acknowledgement.
            if p.publish.qos == QoS::AtMostOnce {
                buffer.push_back(Notification::Forward(p));
                continue;
            }

            // lmos-sidecar patch 29: sent again under the identifier it
            // was sent under before
            let resend = self.seldom.as_deref_mut().map(|seldom| &mut seldom.resend);
            let pkid = match resent(resend, filter_idx, p.cursor) {
                Some(pkid) => {
                    // lmos-sidecar patch 30: sent before, under this
                    // identifier (also in an earlier run)
                    p.publish.dup = true;
                    pkid
                }
                None => {
                    // Index and pkid of current outgoing packet
                    self.last_pkid += 1;
                    let pkid = self.last_pkid;
                    // Place max pkid packet at index 0
                    if self.last_pkid == MAX_PKID {
                        self.last_pkid = 0;
                    }
                    pkid
                }
            };
            p.publish.pkid = pkid;
            if let (QoS::ExactlyOnce, Some(cursor)) = (p.publish.qos, p.cursor) {
                sent_qos2.push((pkid, cursor));
            }

            self.inflight_buffer.push_back((pkid, filter_idx, p.cursor));
            buffer.push_back(Notification::Forward(p));
        }

        let buffer_count = buffer.len();
        let inflight_count = self.inflight_buffer.len();

        if inflight_count > MAX_INFLIGHT {
            warn!(
                "More inflight publishes than max allowed, inflight count = {}, max allowed = {}",
                inflight_count, MAX_INFLIGHT
            );
        }

        (buffer_count, inflight_count)
    }

    /// lmos-sidecar patch 29: what was sent from the log and not
    /// acknowledged, for the session's next connection.
    pub fn unacknowledged(&self) -> Vec<(u16, FilterIdx, Cursor)> {
        self.inflight_buffer
            .iter()
            .filter_map(|&(pkid, idx, cursor)| Some((pkid, idx, cursor?)))
            .collect()
    }

    /// lmos-sidecar patch 29: a resumed session's unacknowledged
    /// publications keep their identifiers; new ones count on after them.
    pub fn resume_sent(&mut self, sent: Vec<(u16, FilterIdx, Cursor)>) {
        if let Some(&(last, _, _)) = sent.last() {
            self.last_pkid = if last == MAX_PKID { 0 } else { last };
        }
        if !sent.is_empty() || self.seldom.is_some() {
            self.seldom().resend = sent;
        }
    }

    /// lmos-sidecar patch 37: a resumed session's PubRels awaiting their
    /// PubComp.
    pub(crate) fn resume_pubrels(&mut self, pubrels: VecDeque<u16>) {
        if !pubrels.is_empty() {
            self.seldom().unacked_pubrels = pubrels;
        }
    }

    /// lmos-sidecar patch 37: the PubRels awaiting their PubComp, for the
    /// session's next connection.
    pub(crate) fn take_pubrels(&mut self) -> VecDeque<u16> {
        self.seldom
            .as_deref_mut()
            .map(|seldom| std::mem::take(&mut seldom.unacked_pubrels))
            .unwrap_or_default()
    }

    // Returns (unsolicited, outoforder) flags
    // Return: Out of order or unsolicited acks
    /// lmos-sidecar patch 13: also says what was acknowledged (its filter
    /// and, for a publication from the log, where it was).
    pub fn register_ack(&mut self, pkid: u16) -> Option<(FilterIdx, Option<Cursor>)> {
        let (head, filter_idx, cursor) = self.inflight_buffer.pop_front()?;

        // We don't support out of order acks
        if pkid != head {
            error!(pkid, head, "out of order ack.");
            return None;
        }

        Some((filter_idx, cursor))
    }

    pub fn register_pubrec(&mut self, pkid: u16) {
        // NOTE: we can return true of false
        // to indicate whether this is duplicate or not
        self.seldom().unacked_pubrels.push_back(pkid);
    }

    // OASIS standards don't specify anything about ordering of PubComp
    // https://docs.oasis-open.org/mqtt/mqtt/v5.0/os/mqtt-v5.0-os.html#_Toc3901240
    // But we don't support out of order / unsolicited pubcomps
    // to be consistent with the behaviour with other acks
    pub fn register_pubcomp(&mut self, pkid: u16) -> Option<()> {
        let id = self.seldom.as_deref_mut()?.unacked_pubrels.pop_front()?;

        // out of order acks
        if pkid != id {
            error!(pkid, id, "out of order ack.");
            return None;
        }

        Some(())
    }

    // Here we are assuming that the first unique filter_idx we find while iterating will have the
    // least corresponding cursor because of the way we insert into the inflight_buffer
    pub fn retransmission_map(&self) -> HashMap<FilterIdx, Cursor> {
        let mut o = HashMap::new();
        for (_, filter_idx, cursor) in self.inflight_buffer.iter() {
            // if cursor in None, it means it was a retained publish
            if !o.contains_key(filter_idx) && cursor.is_some() {
                o.insert(*filter_idx, cursor.unwrap());
            }
        }

        o
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn retransmission_map_is_calculated_accurately() {
        let (mut outgoing, _) = Outgoing::new("retransmission-test".to_string());
        let mut result = HashMap::new();

        result.insert(0, (0, 8));
        result.insert(1, (0, 1));
        result.insert(2, (1, 1));
        result.insert(3, (1, 0));

        let buf = vec![
            (1, 0, Some((0, 8))),
            (1, 0, Some((0, 10))),
            (1, 1, Some((0, 1))),
            (3, 1, Some((0, 4))),
            (2, 2, Some((1, 1))),
            (1, 2, Some((2, 6))),
            (1, 2, Some((2, 1))),
            (1, 3, Some((1, 0))),
            (1, 3, Some((1, 1))),
            (1, 3, Some((1, 3))),
            (1, 3, Some((1, 3))),
        ];

        outgoing.inflight_buffer.extend(buf);
        assert_eq!(outgoing.retransmission_map(), result);
    }

    // use super::{Outgoing, MAX_INFLIGHT};
    // use crate::protocol::{Publish, QoS};
    // use crate::router::Forward;
    // use crate::Notification;
    //
    // fn publishes(count: usize) -> impl Iterator<Item = Forward> {
    //     (1..=count).map(|v| {
    //         let publish = Publish {
    //             dup: false,
    //             retain: false,
    //             pkid: 0,
    //             qos: QoS::AtLeastOnce,
    //             topic: "hello/world".into(),
    //             payload: vec![1, 2, 3].into(),
    //         };
    //
    //         Forward {
    //             cursor: (0, v as u64),
    //             publish,
    //             size: 0,
    //         }
    //     })
    // }
    //
    // #[test]
    // fn inflight_ring_buffer_pushes_correctly() {
    //     let count = MAX_INFLIGHT as usize;
    //     let (mut outgoing, _rx) = Outgoing::new("hello".to_owned());
    //     outgoing.push_forwards(publishes(count), 1, 3);
    //
    //     // Index 1 = (0, 1), Index 99 = (0, 99), Index 0 = (0, 100)
    //     assert_eq!(outgoing.inflight_buffer[0].unwrap().1, (0, count as u64));
    //     for i in 1..count {
    //         assert_eq!(outgoing.inflight_buffer[i].unwrap().1, (0, i as u64));
    //     }
    //
    //     // Outgoing publish pkids are as expected
    //     for (i, o) in outgoing.data_buffer.lock().iter().enumerate() {
    //         let pkid = match &o {
    //             Notification::Forward(f) => f.publish.pkid,
    //             _ => unreachable!(),
    //         };
    //
    //         assert_eq!(pkid, i as u16 + 1);
    //     }
    // }
    //
    // #[test]
    // fn inflight_ring_buffer_pops_correctly() {
    //     let (mut outgoing, _rx) = Outgoing::new("hello".to_owned());
    //     outgoing.push_forwards(publishes(MAX_INFLIGHT as usize), 1, 3);
    //
    //     for pkid in 1..=MAX_INFLIGHT {
    //         let (unsolicited, outoforder) = outgoing.register_ack(pkid);
    //         assert_eq!(unsolicited, false);
    //         assert_eq!(outoforder, false);
    //     }
    // }
}

/// lmos-sidecar patch 29: the identifier `(filter_idx, cursor)` was sent
/// under before the session's connection ended, if it was.
fn resent(
    resend: Option<&mut Vec<(u16, FilterIdx, Cursor)>>,
    filter_idx: FilterIdx,
    cursor: Option<Cursor>,
) -> Option<u16> {
    let (resend, cursor) = (resend?, cursor?);
    let at = resend
        .iter()
        .position(|&(_, idx, c)| idx == filter_idx && c == cursor)?;
    Some(resend.swap_remove(at).0)
}
