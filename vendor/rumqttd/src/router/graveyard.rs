use std::collections::{HashMap, VecDeque};

use crate::protocol::{Publish, PublishProperties};
use crate::router::FilterIdx;
use crate::Cursor;

use super::{
    subscriptions::Subscriptions,
    scheduler::{PauseReason, Tracker},
    ConnectionEvents,
};

pub struct Graveyard {
    connections: HashMap<String, SavedState>,
}

impl Graveyard {
    pub fn new() -> Graveyard {
        Graveyard {
            connections: HashMap::new(),
        }
    }

    /// Add a new connection.
    /// Return tracker of previous connection if connection id already exists
    pub fn retrieve(&mut self, id: &str) -> Option<SavedState> {
        self.connections.remove(id)
    }

    /// Save connection tracker
    pub fn save_state(
        &mut self,
        mut tracker: Tracker,
        options: Subscriptions,
        metrics: ConnectionEvents,
        unacked_pubrels: VecDeque<u16>,
        received: VecDeque<(Publish, Option<PublishProperties>)>,
        sent: Vec<(u16, FilterIdx, Cursor)>,
    ) {
        tracker.pause(PauseReason::Busy);
        let id = tracker.id.clone();

        let session_state = SessionState {
            tracker,
            options,
            unacked_pubrels,
            received,
            sent,
        };

        self.connections.insert(
            id,
            SavedState {
                session_state: Some(session_state),
                metrics,
            },
        );
    }
}

#[derive(Debug)]
pub struct SavedState {
    pub session_state: Option<SessionState>,
    pub metrics: ConnectionEvents,
}

#[derive(Debug)]
pub struct SessionState {
    pub tracker: Tracker,
    /// lmos-sidecar patch 14: the subscriptions' options, IDs among them,
    /// for the session's next connection; lmos-sidecar patch 35: by filter,
    /// the session's subscriptions (a set of the same filters was kept
    /// beside them)
    pub options: Subscriptions,
    // used for pubrel in qos2
    pub unacked_pubrels: VecDeque<u16>,
    /// lmos-sidecar patch 21: QoS 2 publications the client sent and the
    /// broker acknowledged with PUBREC, awaiting their PUBREL
    pub received: VecDeque<(Publish, Option<PublishProperties>)>,
    /// lmos-sidecar patch 29: publications sent from the log and not
    /// acknowledged, with their packet identifiers, in the order sent
    pub sent: Vec<(u16, FilterIdx, Cursor)>,
}
