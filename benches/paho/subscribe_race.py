#!/usr/bin/env python3
"""
The race the Paho suite's test_request_response and test_subscribe_options
run: client B sends SUBSCRIBE and client A, at once, a PUBLISH to the
subscribed topic, without waiting for B's SUBACK; counts the rounds in which
B never gets the publication. A broker that serves its sockets in the order
they became readable misses none.

usage: subscribe_race.py PORT ROUNDS [SETTLE_S]
       PORT      an MQTT 5 listener on 127.0.0.1
       SETTLE_S  how long B is connected before it subscribes (default 0:
                 SUBSCRIBE right after its CONNACK; the Paho tests wait 0.5 s)
"""
import socket, struct, sys, time


def varint(n):
    out = b""
    while True:
        byte, n = n % 128, n // 128
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def packet(first, body):
    return bytes([first]) + varint(len(body)) + body


def text(s):
    s = s.encode()
    return struct.pack(">H", len(s)) + s


def connect(client_id, port):
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # MQTT 5 CONNECT: clean start, no keep-alive, no properties.
    c.sendall(packet(0x10, text("MQTT") + bytes([5, 2]) + struct.pack(">H", 0) + b"\x00"
                     + text(client_id)))
    c.recv(100)
    return c


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    port, rounds = int(sys.argv[1]), int(sys.argv[2])
    settle = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    missed = 0
    for i in range(rounds):
        a, b = connect("race-a", port), connect("race-b", port)
        time.sleep(settle)
        topic = "race/%d" % i
        b.sendall(packet(0x82, struct.pack(">H", 1) + b"\x00" + text(topic) + b"\x01"))
        a.sendall(packet(0x30, text(topic) + b"\x00" + b"hello"))
        b.settimeout(1.0)
        got = b""
        try:
            while b"hello" not in got:
                data = b.recv(1000)
                if not data:
                    break
                got += data
        except socket.timeout:
            pass
        missed += b"hello" not in got
        a.close()
        b.close()
    print("missed %d of %d" % (missed, rounds))


if __name__ == "__main__":
    sys.exit(main())
