"""The Eclipse Paho interoperability suite's behaviours that do not depend
on TCP (client_test.py, client_test5.py in ../shared/conformance), asserted
again with paho-mqtt's own WebSocket transport against the sidecar's /mqtt,
for MQTT 3.1.1 and 5:

    python3 behaviours.py HOST PORT

Prints one line per behaviour and version (PASS/FAIL name: why) and exits
non-zero if any failed. Each behaviour uses topics of its own run.
"""

import queue
import sys
import time
import uuid

import paho.mqtt.client as mqtt

HOST, PORT = sys.argv[1], int(sys.argv[2])
WAIT = 10


class Probe:
    """A paho-mqtt client over WebSocket whose messages land in a queue."""

    def __init__(self, version, client_id=None, clean=True, will=None, keepalive=60):
        protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
        cid = client_id if client_id is not None else "paho-ws-" + uuid.uuid4().hex[:8]
        kwargs = {"client_id": cid, "protocol": protocol, "transport": "websockets"}
        if version != 5:
            kwargs["clean_session"] = clean
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, **kwargs)
        self.client.ws_set_options(path="/mqtt")
        self.version, self.clean, self.keepalive = version, clean, keepalive
        self.messages = queue.Queue()
        self.acks = queue.Queue()
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_connect = lambda c, u, f, rc, p: self.acks.put(("connack", f, rc))
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.acks.put(("suback", mid, rcs))
        self.client.on_unsubscribe = lambda c, u, mid, rcs, p: self.acks.put(("unsuback", mid))
        if will:
            self.client.will_set(*will)

    def connect(self):
        if self.version == 5:
            props = mqtt.Properties(mqtt.PacketTypes.CONNECT)
            if not self.clean:
                props.SessionExpiryInterval = 300
            self.client.connect(HOST, PORT, self.keepalive, clean_start=self.clean, properties=props)
        else:
            self.client.connect(HOST, PORT, self.keepalive)
        self.client.loop_start()
        kind, flags, rc = self.acks.get(timeout=WAIT)
        assert kind == "connack" and not rc.is_failure, (kind, rc)
        return flags

    def subscribe(self, *filters):
        _, mid = self.client.subscribe([(f, q) for f, q in filters])
        kind, got, rcs = self.acks.get(timeout=WAIT)
        assert kind == "suback" and got == mid, (kind, got, mid)
        return [int(rc.value) if hasattr(rc, "value") else int(rc) for rc in rcs]

    def publish(self, topic, payload, qos=0, retain=False):
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(timeout=WAIT)
        assert info.is_published(), topic

    def receive(self, within=WAIT):
        return self.messages.get(timeout=within)

    def nothing(self, within=1.0):
        try:
            m = self.messages.get(timeout=within)
        except queue.Empty:
            return True
        raise AssertionError("unexpected message on %s: %r" % (m.topic, m.payload))

    def disconnect(self):
        self.client.disconnect()
        self.client.loop_stop()

    def vanish(self):
        """Stops without DISCONNECT and without pinging: the broker must
        notice by the keep-alive and publish the will."""
        self.client.loop_stop()
        self.client._sock.close()


def base():
    return "paho-ws/" + uuid.uuid4().hex[:8]


def basic(v):
    topic = base() + "/basic"
    c = Probe(v)
    c.connect()
    assert c.subscribe((topic, 2)) == [2]
    for qos in (0, 1, 2):
        c.publish(topic, b"qos %d" % qos, qos=qos)
        m = c.receive()
        assert (m.topic, m.payload, m.qos) == (topic, b"qos %d" % qos, qos), (m.topic, m.payload, m.qos)
    c.disconnect()


def retained_messages(v):
    b = base()
    topics = [b + "/retained/a", b + "/retained/b/c", b + "/retained/d"]
    p = Probe(v)
    p.connect()
    for i, t in enumerate(topics):
        p.publish(t, b"r%d" % i, qos=i % 3, retain=True)
    c = Probe(v)
    c.connect()
    c.subscribe((b + "/retained/#", 2))
    got = sorted((m.topic, m.payload, m.retain) for m in (c.receive() for _ in topics))
    assert got == sorted((t, b"r%d" % i, True) for i, t in enumerate(topics)), got
    for t in topics:
        p.publish(t, b"", qos=1, retain=True)
    c.disconnect()
    d = Probe(v)
    d.connect()
    d.subscribe((b + "/retained/#", 2))
    d.nothing()
    d.disconnect()
    p.disconnect()


def will_message_and_keepalive(v):
    topic = base() + "/will"
    w = Probe(v)
    w.connect()
    w.subscribe((topic, 2))
    dying = Probe(v, will=(topic, b"gone", 1, False), keepalive=2)
    dying.connect()
    dying.vanish()
    m = w.receive(within=15)
    assert (m.topic, m.payload) == (topic, b"gone"), (m.topic, m.payload)
    w.disconnect()


def zero_length_clientid(v):
    c = Probe(v, client_id="")
    c.connect()
    c.disconnect()


def unsubscribe(v):
    b = base()
    c = Probe(v)
    c.connect()
    c.subscribe((b + "/a", 2), (b + "/b", 2))
    _, mid = c.client.unsubscribe(b + "/a")
    assert c.acks.get(timeout=WAIT)[0] == "unsuback"
    c.publish(b + "/a", b"not for me", qos=1)
    c.publish(b + "/b", b"for me", qos=1)
    m = c.receive()
    assert (m.topic, m.payload) == (b + "/b", b"for me"), (m.topic, m.payload)
    c.nothing()
    c.disconnect()


def overlapping_subscriptions(v):
    b = base()
    c = Probe(v)
    c.connect()
    c.subscribe((b + "/#", 2), (b + "/x/+", 1))
    c.publish(b + "/x/y", b"overlap", qos=2)
    first = c.receive()
    assert first.payload == b"overlap"
    # One copy at the larger QoS, or one per subscription (both allowed).
    qos = [first.qos]
    try:
        qos.append(c.receive(within=1).qos)
    except queue.Empty:
        pass
    assert 2 in qos, qos
    c.disconnect()


def offline_message_queueing(v):
    b = base()
    cid = "paho-ws-offline-" + uuid.uuid4().hex[:6]
    c = Probe(v, client_id=cid, clean=False)
    c.connect()
    c.subscribe((b + "/+", 2))
    c.disconnect()
    p = Probe(v)
    p.connect()
    for i, qos in enumerate((1, 2)):
        p.publish(b + "/q%d" % i, b"queued %d" % i, qos=qos)
    p.disconnect()
    again = Probe(v, client_id=cid, clean=False)
    flags = again.connect()
    got = sorted(m.payload for m in (again.receive() for _ in range(2)))
    assert got == [b"queued 0", b"queued 1"], (got, flags)
    again.disconnect()
    # Clean up the kept session.
    Probe(v, client_id=cid, clean=True).connect()


BEHAVIOURS = [
    basic,
    retained_messages,
    will_message_and_keepalive,
    zero_length_clientid,
    unsubscribe,
    overlapping_subscriptions,
    offline_message_queueing,
]

failed = 0
for version in (4, 5):
    for behaviour in BEHAVIOURS:
        name = "%s (MQTT %s)" % (behaviour.__name__, "5" if version == 5 else "3.1.1")
        try:
            behaviour(version)
            print("PASS", name, flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed += 1
            print("FAIL", name + ":", repr(e), flush=True)
sys.exit(1 if failed else 0)
