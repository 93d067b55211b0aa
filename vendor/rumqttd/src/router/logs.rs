use super::Ack;
use tracing::{info, trace};

use crate::protocol::{
    matches, ConnAck, ConnAckProperties, LastWill, LastWillProperties, PingResp, PubAck, PubComp,
    PubCompReason, PubRec, PubRel, Publish, PublishProperties, SubAck, UnsubAck,
};
use crate::router::persist::{self, Keeper, Position as KeptPosition, RestoredPublication, RestoredRetained};
use crate::router::options::{Source, SubscriptionOptions};
use crate::router::{log_filter, DataRequest, FilterIdx, SubscriptionMeter, Waiters};
use crate::{ConnectionId, Filter, Offset, RouterConfig, Topic};

use crate::segments::{CommitLog, Position};
use crate::Storage;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::time::Instant;

type PubWithProp = (Publish, Option<PublishProperties>);

#[derive(Clone)]
pub struct PublishData {
    pub publish: Publish,
    pub properties: Option<PublishProperties>,
    pub timestamp: Instant,
    /// lmos-sidecar patch 14: who published it, on how many filters
    pub source: Source,
}

impl From<PubWithProp> for PublishData {
    fn from((publish, properties): PubWithProp) -> Self {
        PublishData {
            publish,
            properties,
            timestamp: Instant::now(),
            source: Source::NONE,
        }
    }
}

/// A publication read from a filter's log: where it stands in the log, and
/// where it came from (lmos-sidecar patch 14).
pub type ReadPublication = (PubWithProp, Offset, Source);

// TODO: remove this from here
impl Storage for PublishData {
    /// lmos-sidecar patch 32: the properties count too (MQTT 5 user
    /// properties can carry as many bytes as the payload), so that a
    /// filter's log stops at its segments' size whatever carries the bytes.
    fn size(&self) -> usize {
        let publish = &self.publish;
        4 + publish.topic.len()
            + publish.payload.len()
            + crate::protocol::v5::publish::properties_len(&self.properties)
    }
}

/// Stores 'device' data and 'actions' data in native commitlog
/// organized by subscription filter. Device data is replicated
/// while actions data is not
pub struct DataLog {
    pub config: RouterConfig,
    /// Native commitlog data organized by subscription. Contains
    /// device data and actions data logs.
    ///
    /// Device data is replicated while actions data is not.
    /// Also has waiters used to wake connections/replicator tracker
    /// which are caught up with all the data on 'Filter' and waiting
    /// for new data
    ///
    /// lmos-sidecar patch: a map instead of a `Slab`, so that a filter's
    /// log can be removed (see `release`) and its index is never handed
    /// to another filter: stale indexes may linger in `Outgoing`'s
    /// inflight buffer and in requests, and must not find a new filter.
    pub native: HashMap<FilterIdx, Data<PublishData>>,
    /// Index the next new filter gets (lmos-sidecar patch)
    next_filter_idx: FilterIdx,
    /// Map of subscription filter name to filter index
    filter_indexes: HashMap<Filter, FilterIdx>,
    retained_publishes: HashMap<Topic, PublishData>,
    /// Told of every change of `retained_publishes` and of kept sessions
    /// (lmos-sidecar patches 12 and 13)
    keeper: Option<Box<dyn Keeper>>,
    /// Kept sessions (not clean, live or in the graveyard) by filter: their
    /// client IDs and QoS (lmos-sidecar patch 13)
    kept: HashMap<FilterIdx, HashMap<String, u8>>,
    /// The first segment still in memory of each filter a kept session
    /// holds, as the keeper last knew it (lmos-sidecar patch 19)
    kept_head: HashMap<FilterIdx, u64>,
    /// List of filters associated with a topic
    publish_filters: HashMap<Topic, Vec<FilterIdx>>,
}

impl DataLog {
    pub fn new(config: RouterConfig) -> io::Result<DataLog> {
        let mut native = HashMap::new();
        let mut filter_indexes = HashMap::new();
        let retained_publishes = HashMap::new();
        let publish_filters = HashMap::new();

        if let Some(warmup_filters) = config.initialized_filters.clone() {
            for filter in warmup_filters {
                let mut data = Data::new(&filter, &config);
                // Held by the configuration: never released
                data.holders = 1;

                // Add commitlog to datalog and add datalog index to filter to
                // datalog index map
                let idx = native.len();
                native.insert(idx, data);
                filter_indexes.insert(filter, idx);
            }
        }

        Ok(DataLog {
            config,
            next_filter_idx: native.len(),
            native,
            publish_filters,
            filter_indexes,
            retained_publishes,
            keeper: None,
            kept: HashMap::new(),
            kept_head: HashMap::new(),
        })
    }

    /// lmos-sidecar patch 12: starts with the retained messages of an
    /// earlier run (those that expired since are dropped, and the keeper
    /// told) and tells `keeper` of every later change.
    pub fn restore_retained(&mut self, retained: Vec<RestoredRetained>, mut keeper: Box<dyn Keeper>) {
        let now = Instant::now();
        for restored in retained {
            match persist::decode(&restored, now) {
                persist::Decoded::Live(publish, properties, timestamp) => {
                    let topic = String::from_utf8_lossy(&publish.topic).into_owned();
                    let data = PublishData {
                        publish,
                        properties,
                        timestamp,
                        source: Source::NONE,
                    };
                    self.retained_publishes.insert(topic, data);
                }
                persist::Decoded::Expired(topic) => keeper.retained(&topic, None),
                persist::Decoded::Unreadable => {}
            }
        }
        self.keeper = Some(keeper);
    }

    /// lmos-sidecar patch 13: a kept session's new subscription.
    /// `idx`: the filter whose publications are queued for the session,
    /// none for a shared subscription (patch 28).
    pub fn keep_subscription(
        &mut self,
        idx: Option<FilterIdx>,
        client_id: &str,
        filter: &str,
        options: &SubscriptionOptions,
    ) {
        if let Some(idx) = idx {
            self.restore_kept(idx, client_id, options.qos);
        }
        if let Some(keeper) = &mut self.keeper {
            keeper.subscribed(client_id, filter, options);
        }
    }

    /// lmos-sidecar patch 13: a restored session's subscription, already
    /// kept.
    pub fn restore_kept(&mut self, idx: FilterIdx, client_id: &str, qos: u8) {
        self.kept
            .entry(idx)
            .or_default()
            .insert(client_id.to_owned(), qos);
        if let Some(data) = self.native.get(&idx) {
            let (head, _) = data.log._head_and_tail();
            self.kept_head.entry(idx).or_insert(head);
        }
    }

    /// lmos-sidecar patch 13: a kept session left `filter` (before the
    /// filter is released).
    pub fn forget_subscription(&mut self, client_id: &str, filter: &str) {
        if let Some(idx) = self.filter_indexes.get(log_filter(filter)) {
            if let Some(clients) = self.kept.get_mut(idx) {
                clients.remove(client_id);
            }
        }
        if let Some(keeper) = &mut self.keeper {
            keeper.unsubscribed(client_id, filter);
        }
    }

    /// lmos-sidecar patch 13: a kept session ended (before its filters are
    /// released).
    pub fn forget_session<'a>(&mut self, client_id: &str, subscriptions: impl IntoIterator<Item = &'a Filter>) {
        for filter in subscriptions {
            if let Some(idx) = self.filter_indexes.get(log_filter(filter)) {
                if let Some(clients) = self.kept.get_mut(idx) {
                    clients.remove(client_id);
                }
            }
        }
        if let Some(keeper) = &mut self.keeper {
            keeper.ended(client_id);
        }
    }

    /// lmos-sidecar patch 13: a publication appended at `offset` of `idx`
    /// is queued for every kept session subscribed there at QoS 1 or 2.
    pub fn keep_appended(
        &mut self,
        idx: FilterIdx,
        offset: Offset,
        publish: &Publish,
        properties: &Option<PublishProperties>,
    ) {
        let (Some(keeper), Some(clients), Some(data)) =
            (&mut self.keeper, self.kept.get(&idx), self.native.get(&idx))
        else {
            return;
        };
        // lmos-sidecar patch 19: the segments this append pushed out of
        // memory are gone for the kept sessions too
        let (head, _) = data.log._head_and_tail();
        let known = self.kept_head.entry(idx).or_insert(head);
        for segment in *known..head {
            keeper.dropped(idx, segment, &mut clients.keys().map(String::as_str));
        }
        *known = head;
        if publish.qos == crate::protocol::QoS::AtMostOnce {
            return;
        }
        // `append` answers the offset after the publication's
        let offset = (offset.0, offset.1.saturating_sub(1));
        let mut waiting = clients
            .iter()
            .filter(|(_, &qos)| qos > 0)
            .map(|(client, _)| client.as_str())
            .peekable();
        if waiting.peek().is_none() {
            return;
        }
        if let Some(packet) = persist::encode(publish, properties, false) {
            keeper.queued((idx, offset), &data.filter, &packet, &mut waiting);
        }
    }

    /// lmos-sidecar patch 20: `client_id`'s will registered (`Some`) or
    /// gone. Written as the PUBLISH it becomes, with its delay; nothing is
    /// built without a keeper.
    pub fn keep_will(
        &mut self,
        client_id: &str,
        will: Option<(&LastWill, &Option<LastWillProperties>)>,
    ) {
        let Some(keeper) = &mut self.keeper else {
            return;
        };
        let Some((will, properties)) = will else {
            keeper.will(client_id, None);
            return;
        };
        let delay = properties
            .as_ref()
            .and_then(|p| p.delay_interval)
            .unwrap_or(0);
        let (publish, properties) = persist::will_publication(will.clone(), properties.clone());
        if let Some(packet) = persist::encode(&publish, &properties, publish.retain) {
            keeper.will(client_id, Some((&packet, delay)));
        }
    }

    /// lmos-sidecar patch 21: a kept session's QoS 2 publication
    /// acknowledged with PUBREC (`Some`), or completed by its PUBREL.
    pub fn keep_received(
        &mut self,
        client_id: &str,
        pkid: u16,
        publication: Option<(&Publish, &Option<PublishProperties>)>,
    ) {
        let Some(keeper) = &mut self.keeper else {
            return;
        };
        match publication {
            Some((publish, properties)) => {
                if let Some(packet) = persist::encode(publish, properties, publish.retain) {
                    keeper.received(client_id, pkid, Some(&packet));
                }
            }
            None => keeper.received(client_id, pkid, None),
        }
    }

    /// lmos-sidecar patch 30: a kept session was sent the QoS 2
    /// publication at `position` under `pkid`.
    pub fn keep_sent(&mut self, client_id: &str, position: KeptPosition, pkid: u16) {
        if let Some(keeper) = &mut self.keeper {
            keeper.sent(client_id, position, pkid);
        }
    }

    /// lmos-sidecar patch 27: the broker owes a kept session's client the
    /// PUBREL for `pkid` (`owed`), or no longer (its PUBCOMP came).
    pub fn keep_releasing(&mut self, client_id: &str, pkid: u16, owed: bool) {
        if let Some(keeper) = &mut self.keeper {
            keeper.releasing(client_id, pkid, owed);
        }
    }

    /// lmos-sidecar patch 13: a kept session acknowledged what it got from
    /// `idx` at `cursor`.
    pub fn keep_delivered(&mut self, client_id: &str, idx: FilterIdx, cursor: Offset) {
        if let Some(keeper) = &mut self.keeper {
            keeper.delivered(client_id, (idx, cursor));
        }
    }

    /// lmos-sidecar patch 13: appends a restored publication to `filter`'s
    /// log (creating it); its position.
    pub fn append_restored(
        &mut self,
        filter: &str,
        publication: &RestoredPublication,
        sessions: u32,
    ) -> Option<KeptPosition> {
        let (publish, properties) = persist::read(&publication.packet)?;
        let (idx, _) = self.next_native_offset(filter);
        let data = self.native.get_mut(&idx)?;
        let mut none = VecDeque::new();
        let (offset, _) = data.append((publish, properties).into(), &mut none);
        // `append` answers the offset after the publication's
        let offset = (offset.0, offset.1.saturating_sub(1));
        if let Some(keeper) = &mut self.keeper {
            keeper.placed((idx, offset), &publication.key, sessions);
        }
        Some((idx, offset))
    }

    pub fn meter(&mut self, filter: &str) -> Option<&mut SubscriptionMeter> {
        let data = self.native.get_mut(self.filter_indexes.get(filter)?)?;
        Some(&mut data.meter)
    }

    pub fn waiters(&self, filter: &Filter) -> Option<&Waiters<DataRequest>> {
        self.native
            .get(self.filter_indexes.get(filter)?)
            .map(|data| &data.waiters)
    }

    /// lmos-sidecar patch: `filter` is the subscription as the client named
    /// it, `$share/group/` and all, and only the request made for that
    /// subscription is removed. It used to look the log up by the full name
    /// (none for a shared subscription, whose request stayed parked) and
    /// remove the connection's first request on the log, which is another
    /// subscription's when the connection holds both `f` and `$share/g/f`.
    pub fn remove_waiters_for_id(
        &mut self,
        id: ConnectionId,
        filter: &Filter,
    ) -> Option<DataRequest> {
        let data = self
            .native
            .get_mut(self.filter_indexes.get(log_filter(filter))?)?;
        let waiters = data.waiters.get_mut();

        waiters
            .iter()
            .position(|(conn_id, request)| *conn_id == id && request.filter == *filter)
            .and_then(|index| {
                waiters
                    .swap_remove_back(index)
                    .map(|(_, data_req)| data_req)
            })
    }

    // TODO: Currently returning a Option<Vec> instead of Option<&Vec> due to Rust borrow checker
    // limitation
    pub fn matches(&mut self, topic: &str) -> Option<Vec<usize>> {
        match &self.publish_filters.get(topic) {
            Some(v) => Some(v.to_vec()),
            None => {
                let v: Vec<usize> = self
                    .filter_indexes
                    .iter()
                    .filter(|(filter, _)| matches(topic, filter))
                    .map(|(_, filter_idx)| *filter_idx)
                    .collect();

                if !v.is_empty() {
                    self.publish_filters.insert(topic.to_owned(), v.clone());
                }

                Some(v)
            }
        }
    }

    /// lmos-sidecar patch 14: a filter's name by its index.
    pub fn filter_name(&self, idx: FilterIdx) -> Option<&Filter> {
        self.native.get(&idx).map(|data| &data.filter)
    }

    pub fn next_native_offset(&mut self, filter: &str) -> (FilterIdx, Offset) {
        let publish_filters = &mut self.publish_filters;
        let filter_indexes = &mut self.filter_indexes;

        let (filter_idx, data) = match filter_indexes.get(filter) {
            Some(idx) => (*idx, self.native.get(idx).unwrap()),
            None => {
                let data = Data::new(filter, &self.config);

                // Add commitlog to datalog and add datalog index to filter to
                // datalog index map
                let idx = self.next_filter_idx;
                self.next_filter_idx += 1;
                self.native.insert(idx, data);
                self.filter_indexes.insert(filter.to_owned(), idx);

                // Match new filter to existing topics and add to publish_filters if it matches
                for (topic, filters) in publish_filters.iter_mut() {
                    if matches(topic, filter) {
                        filters.push(idx);
                    }
                }

                (idx, self.native.get(&idx).unwrap())
            }
        };

        (filter_idx, data.log.next_offset())
    }

    /// lmos-sidecar patch: one more subscription (of a connection or a
    /// saved session) holds the filter at `filter_idx`.
    pub fn hold(&mut self, filter_idx: FilterIdx) {
        if let Some(data) = self.native.get_mut(&filter_idx) {
            data.holders += 1;
        }
    }

    /// lmos-sidecar patch: `subscriptions` (as clients named them, shared
    /// ones with their `$share/group/` prefix) no longer hold their filters.
    /// A filter nothing holds any more is removed with its log, waiters and
    /// entries in the topic cache. Rumqttd used to keep every filter ever
    /// subscribed to, a few kB each, for the life of the process.
    ///
    /// Requests on a removed filter can outlive it only where rumqttd had
    /// already lost track of them (see `native_readv` and `park`); the
    /// index is never reused, so nothing else can find them.
    pub fn release<'a>(&mut self, subscriptions: impl IntoIterator<Item = &'a Filter>) {
        let mut removed = HashSet::new();
        for subscription in subscriptions {
            let filter = log_filter(subscription);
            let Some(&idx) = self.filter_indexes.get(filter) else {
                continue;
            };
            let data = self.native.get_mut(&idx).unwrap();
            // Every subscription took a hold; a miscount frees the filter
            // early (its requests are then dropped) rather than panic.
            debug_assert!(data.holders > 0, "filter {filter} released unheld");
            data.holders = data.holders.saturating_sub(1);
            if data.holders == 0 {
                self.native.remove(&idx);
                if self.kept.remove(&idx).is_some() {
                    self.kept_head.remove(&idx);
                    if let Some(keeper) = &mut self.keeper {
                        keeper.released(idx);
                    }
                }
                self.filter_indexes.remove(filter);
                removed.insert(idx);
            }
        }

        if !removed.is_empty() {
            self.publish_filters.retain(|_, filters| {
                filters.retain(|idx| !removed.contains(idx));
                !filters.is_empty()
            });
        }
    }

    pub fn native_readv(
        &self,
        filter_idx: FilterIdx,
        offset: Offset,
        len: u64,
    ) -> io::Result<(Position, Vec<ReadPublication>)> {
        // lmos-sidecar patch: no unwrap. A filter is removed once no
        // subscription holds it (`release`); should a request outlive it,
        // reading it is an error, which `forward_device_data` takes for
        // caught up, and `park` then drops the request.
        let data = self.native.get(&filter_idx).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "filter no longer subscribed")
        })?;
        let mut o = Vec::new();
        // TODO: `readv` is infallible but its current return type does not
        // reflect that. Consequently, this method is also infallible.
        // Encoding this information is important so that calling function
        // has more information on how this method behaves.
        let next = data.log.readv(offset, len, &mut o)?;

        let now = Instant::now();
        o.retain_mut(|(pubdata, _)| {
            // Keep data if no properties exists, which implies no message expiry!
            let Some(properties) = pubdata.properties.as_mut() else {
                return true;
            };

            // Keep data if there is no message_expiry_interval
            let Some(message_expiry_interval) = properties.message_expiry_interval.as_mut() else {
                return true;
            };

            let time_spent = (now - pubdata.timestamp).as_secs() as u32;

            let is_valid = time_spent < *message_expiry_interval;

            // ignore expired messages
            if is_valid {
                // set message_expiry_interval to (original value - time spent waiting in server)
                // ref: https://docs.oasis-open.org/mqtt/mqtt/v5.0/os/mqtt-v5.0-os.html#_Toc3901112
                *message_expiry_interval -= time_spent;
            }

            is_valid
        });

        // no need to include timestamp when returning
        let o = o
            .into_iter()
            .map(|(pubdata, offset)| {
                ((pubdata.publish, pubdata.properties), offset, pubdata.source)
            })
            .collect();

        Ok((next, o))
    }

    pub fn shadow(&mut self, filter: &str) -> Option<PubWithProp> {
        let data = self.native.get_mut(self.filter_indexes.get(filter)?)?;
        data.log.last().map(|p| (p.publish, p.properties))
    }

    /// This method is called when the subscriber has caught up with the commit log. In which case,
    /// instead of actively checking for commits in each `Router::run_inner` iteration, we instead
    /// wait and only try reading again when new messages have been added to the commit log. This
    /// methods converts a `DataRequest` (which actively reads the commit log in `Router::consume`)
    /// to a `Waiter` (which only reads when notified).
    pub fn park(&mut self, id: ConnectionId, request: DataRequest) {
        // lmos-sidecar patch: no unwrap; a request on a removed filter is
        // dropped (see `native_readv`).
        if let Some(data) = self.native.get_mut(&request.filter_idx) {
            data.waiters.register(id, request);
        }
    }

    /// Cleanup a connection from all the waiters
    pub fn clean(&mut self, id: ConnectionId) -> Vec<DataRequest> {
        let mut inflight = Vec::new();
        for data in self.native.values_mut() {
            inflight.append(&mut data.waiters.remove(id));
        }

        inflight
    }

    pub fn insert_to_retained_publishes(
        &mut self,
        publish: Publish,
        publish_properties: Option<PublishProperties>,
        topic: Topic,
    ) {
        if let Some(keeper) = &mut self.keeper {
            if let Some(packet) = persist::encode(&publish, &publish_properties, true) {
                keeper.retained(&topic, Some(packet));
            }
        }
        let pub_with_props = (publish, publish_properties);
        self.retained_publishes.insert(topic, pub_with_props.into());
    }

    pub fn remove_from_retained_publishes(&mut self, topic: Topic) {
        let removed = self.retained_publishes.remove(&topic);
        if let (Some(_), Some(sink)) = (removed, &mut self.keeper) {
            sink.retained(&topic, None);
        }
    }

    pub fn read_retained_messages(&mut self, filter: &str) -> Vec<PubWithProp> {
        trace!(info = "reading retain msg", filter = &filter);
        let now = Instant::now();

        // discard expired retained messages
        let sink = &mut self.keeper;
        self.retained_publishes.retain(|topic, pubdata| {
            // Keep data if no properties exists, which implies no message expiry!
            let Some(properties) = pubdata.properties.as_mut() else {
                return true;
            };

            // Keep data if there is no message_expiry_interval
            let Some(message_expiry_interval) = properties.message_expiry_interval.as_mut() else {
                return true;
            };

            let time_spent = (now - pubdata.timestamp).as_secs() as u32;

            let is_valid = time_spent < *message_expiry_interval;
            // lmos-sidecar patch 12: gone from the store too
            if !is_valid {
                if let Some(sink) = sink.as_mut() {
                    sink.retained(topic, None);
                }
            }

            // ignore expired messages
            if is_valid {
                // set message_expiry_interval to (original value - time spent waiting in server)
                // ref: https://docs.oasis-open.org/mqtt/mqtt/v5.0/os/mqtt-v5.0-os.html#_Toc3901112
                *message_expiry_interval -= time_spent;
            }

            is_valid
        });

        // no need to include timestamp when returning
        self.retained_publishes
            .iter()
            .filter(|(topic, _)| matches(topic, filter))
            .map(|(_, p)| (p.publish.clone(), p.properties.clone()))
            .collect()
    }
}

pub struct Data<T> {
    filter: Filter,
    pub log: CommitLog<T>,
    pub waiters: Waiters<DataRequest>,
    meter: SubscriptionMeter,
    /// lmos-sidecar patch: how many subscriptions, of connections and of
    /// saved sessions, hold this filter (`DataLog::hold`, `DataLog::release`)
    holders: usize,
}

impl<T> Data<T>
where
    T: Storage + Clone,
{
    pub fn new(filter: &str, router_config: &RouterConfig) -> Data<T> {
        let mut max_segment_size = router_config.max_segment_size;
        let mut max_mem_segments = router_config.max_segment_count;

        // Override segment config for selected filter
        if let Some(config) = &router_config.custom_segment {
            for (f, segment_config) in config {
                if matches(filter, f) {
                    info!("Overriding segment config for filter: {}", filter);
                    max_segment_size = segment_config.max_segment_size;
                    max_mem_segments = segment_config.max_segment_count;
                }
            }
        }

        // max_segment_size: usize, max_mem_segments: usize
        let log = CommitLog::new(max_segment_size, max_mem_segments).unwrap();

        // lmos-sidecar patch: was `with_capacity(10)`; most filters never
        // have a parked request, and the slots cost memory per filter.
        let waiters = Waiters::with_capacity(0);
        let metrics = SubscriptionMeter::default();
        Data {
            filter: filter.to_owned(),
            log,
            waiters,
            meter: metrics,
            holders: 0,
        }
    }

    /// Writes to all the filters that are mapped to this publish topic
    /// and wakes up consumers that are matching this topic (if they exist)
    pub fn append(
        &mut self,
        item: T,
        notifications: &mut VecDeque<(ConnectionId, DataRequest)>,
    ) -> (Offset, &Filter) {
        let size = item.size();
        let offset = self.log.append(item);
        if let Some(mut parked) = self.waiters.take() {
            notifications.append(&mut parked);
        }

        self.meter.count += 1;
        self.meter.total_size += size;

        (offset, &self.filter)
    }
}

/// Acks log for a subscription
#[derive(Debug)]
pub struct AckLog {
    // Committed acks per connection. First pkid, last pkid, data
    committed: VecDeque<Ack>,
    // Recorded qos 2 publishes
    recorded: VecDeque<(Publish, Option<PublishProperties>)>,
}

impl AckLog {
    /// New log
    pub fn new() -> AckLog {
        // lmos-sidecar patch: was `with_capacity(100)` each, some 44 kB
        // per connection before it acknowledged anything.
        AckLog {
            committed: VecDeque::new(),
            recorded: VecDeque::new(),
        }
    }

    pub fn connack(&mut self, id: ConnectionId, ack: ConnAck, props: Option<ConnAckProperties>) {
        let ack = Ack::ConnAck(id, ack, props);
        self.committed.push_back(ack);
    }

    pub fn suback(&mut self, ack: SubAck) {
        let ack = Ack::SubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn puback(&mut self, ack: PubAck) {
        let ack = Ack::PubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn pubrec(&mut self, publish: Publish, props: Option<PublishProperties>, ack: PubRec) {
        let ack = Ack::PubRec(ack);
        self.recorded.push_back((publish, props));
        self.committed.push_back(ack);
    }

    pub fn pubrel(&mut self, ack: PubRel) {
        let ack = Ack::PubRel(ack);
        self.committed.push_back(ack);
    }

    /// lmos-sidecar patch 21: the publication `ack` completes, by its packet
    /// identifier (PUBRELs may come in another order than their PUBLISHes);
    /// a PUBREL for none the broker knows is answered too, with
    /// `PacketIdentifierNotFound`, as MQTT 5 §4.3.3 asks, rather than by
    /// disconnecting.
    pub fn pubcomp(&mut self, mut ack: PubComp) -> Option<(Publish, Option<PublishProperties>)> {
        let found = self.recorded.iter().position(|(p, _)| p.pkid == ack.pkid);
        let publication = found.and_then(|at| self.recorded.remove(at));
        if publication.is_none() {
            ack.reason = PubCompReason::PacketIdentifierNotFound;
        }
        self.committed.push_back(Ack::PubComp(ack));
        publication
    }

    /// lmos-sidecar patch 21: a resumed session's QoS 2 publications still
    /// awaiting their PUBREL.
    pub fn with_recorded(recorded: VecDeque<(Publish, Option<PublishProperties>)>) -> AckLog {
        AckLog {
            committed: VecDeque::new(),
            recorded,
        }
    }

    /// lmos-sidecar patch 21: kept with the session when its connection ends.
    pub fn into_recorded(self) -> VecDeque<(Publish, Option<PublishProperties>)> {
        self.recorded
    }

    pub fn pingresp(&mut self, ack: PingResp) {
        let ack = Ack::PingResp(ack);
        self.committed.push_back(ack);
    }

    pub fn unsuback(&mut self, ack: UnsubAck) {
        let ack = Ack::UnsubAck(ack);
        self.committed.push_back(ack);
    }

    pub fn readv(&mut self) -> &mut VecDeque<Ack> {
        &mut self.committed
    }
}

#[cfg(test)]
mod test {
    use super::DataLog;
    use crate::router::shared_subs::Strategy;
    use crate::RouterConfig;

    #[test]
    fn publish_filters_updating_correctly_on_new_topic_subscription() {
        let config = RouterConfig {
            max_segment_size: 1024,
            max_connections: 10,
            max_segment_count: 10,
            max_outgoing_packet_count: 1024,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Strategy::RoundRobin,
        };
        let mut data = DataLog::new(config).unwrap();
        data.next_native_offset("topic/a");
        data.matches("topic/a");

        data.next_native_offset("topic/+");

        assert_eq!(data.publish_filters.get("topic/a").unwrap().len(), 2);
    }

    #[test]
    fn publish_filters_updating_correctly_on_new_publish() {
        let config = RouterConfig {
            max_segment_size: 1024,
            max_connections: 10,
            max_segment_count: 10,
            max_outgoing_packet_count: 1024,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Strategy::RoundRobin,
        };
        let mut data = DataLog::new(config).unwrap();
        data.next_native_offset("+/+");

        data.matches("topic/a");

        assert_eq!(data.publish_filters.get("topic/a").unwrap().len(), 1);
    }

    /// lmos-sidecar patch 32: bytes in user properties fill a filter's
    /// log as payload bytes do.
    #[test]
    fn properties_count_toward_a_filters_log() {
        use super::{Data, PublishData};
        use crate::protocol::{Publish, PublishProperties, QoS};
        use crate::segments::Storage;

        let big = PublishProperties {
            user_properties: vec![("k".into(), "v".repeat(10_000)); 4],
            ..PublishProperties::default()
        };
        let publication = || {
            let mut publish = Publish::new("t", "", false);
            publish.qos = QoS::AtLeastOnce;
            PublishData::from((publish, Some(big.clone())))
        };
        assert!(publication().size() > 40_000, "{}", publication().size());
        // Two segments of 64 kB: at most three such publications each.
        let config = RouterConfig {
            max_segment_size: 64 * 1024,
            max_connections: 10,
            max_segment_count: 2,
            max_outgoing_packet_count: 1024,
            custom_segment: None,
            initialized_filters: None,
            shared_subscriptions_strategy: Strategy::RoundRobin,
        };
        let mut data: Data<PublishData> = Data::new("t", &config);
        let mut woken = std::collections::VecDeque::new();
        for _ in 0..100 {
            data.append(publication(), &mut woken);
        }
        assert!(data.log.size() < 4 * 64 * 1024, "{}", data.log.size());
    }

    //     #[test]
    //     fn appends_are_written_to_correct_commitlog() {
    //         pretty_env_logger::init();
    //         let config = RouterConfig {
    //             instant_ack: true,
    //             max_segment_size: 1024,
    //             max_connections: 10,
    //             max_mem_segments: 10,
    //             max_disk_segments: 0,
    //             max_read_len: 1024,
    //             log_dir: None,
    //             dynamic_log: true,
    //         };

    //         let mut data = DataLog::new(config).unwrap();
    //         data.next_native_offset("/devices/2321/actions");
    //         for i in 0..2 {
    //             let publish = Publish::new("/devices/2321/events/imu/jsonarray", QoS::AtLeastOnce, vec![1, 2, 3]);
    //             let v = data.native_append(publish);
    //             dbg!(v);
    //         }

    //         for i in 0..2 {
    //             let publish = Publish::new("/devices/2321/actions", QoS::AtLeastOnce, vec![1, 2, 3]);
    //             let v = data.native_append(publish);
    //             dbg!(v);
    //         }
    //     }
}
