"""A Pulsar traffic client that measures what it sees, for the Pulsar harness.

The Rust side is pulsar-harness/src/traffic.rs; the contract is the one of
pulsar-harness/java/Traffic.java (read its header for every field):

    python traffic.py SERVICE_URL TOPIC SUBSCRIPTION RATE
        [--partitioned] [--duration-ms N] [--drain-ms N] [--run-id ID]
        [--subscription-type Failover|Exclusive] [--send-timeout-ms N]

One consumer (replicated subscription state, initial position Earliest)
receives and acknowledges; one producer (batching off, round-robin over the
partitions) sends RATE messages a second, payload "<run-id>-<seq>", each by
send_async, timed until its acknowledgement. It runs until standard input
says "stop" or closes, or the duration has passed, then waits for the sends
in flight, drains, and prints the report. Standard output carries JSON lines
only: the client library's log and anything else printed go to standard
error. The Python client does not say where its connection ends, so the
report has no connected_to or redirected_to.
"""

import json
import os
import sys
import threading
import time

# The JSON lines go to a copy of standard output; the descriptor itself now
# points at standard error, so that the client library's own output (it logs
# to standard output by default) cannot mix into them.
OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

import pulsar  # noqa: E402  (after the redirection on purpose)


def emit(obj):
    OUT.write(json.dumps(obj, separators=(",", ":")) + "\n")
    OUT.flush()


class Traffic:
    def __init__(self, run_id):
        self.lock = threading.Lock()
        self.prefix = run_id + "-"
        self.acked = set()
        self.received = set()
        self.last_seq = {}
        self.sent = 0
        self.send_errors = 0
        self.first_send_error = None
        self.worst = 0.0
        self.deliveries = 0
        self.duplicates = 0
        self.reordered = 0
        self.foreign = 0
        self.in_flight = 0
        self.producer_disconnects = 0
        self.consumer_disconnects = 0

    def completed(self, seq, t0, result):
        took = time.monotonic() - t0
        with self.lock:
            self.worst = max(self.worst, took)
            if result == pulsar.Result.Ok:
                self.acked.add(seq)
            else:
                self.send_errors += 1
                if self.first_send_error is None:
                    self.first_send_error = str(result)
            self.in_flight -= 1

    def record(self, partition, payload):
        with self.lock:
            if not payload.startswith(self.prefix):
                self.foreign += 1
                return
            try:
                seq = int(payload[len(self.prefix):])
            except ValueError:
                self.foreign += 1
                return
            self.deliveries += 1
            if seq in self.received:
                self.duplicates += 1
            self.received.add(seq)
            last = self.last_seq.get(partition)
            self.last_seq[partition] = seq
            if last is not None and seq < last:
                self.reordered += 1

    def all_received(self):
        with self.lock:
            return self.acked <= self.received

    def progress(self):
        with self.lock:
            return {
                "type": "progress",
                "sent": self.sent,
                "acked": len(self.acked),
                "send_errors": self.send_errors,
                "received": self.deliveries,
                "unique_received": len(self.received),
                "producer_disconnects": self.producer_disconnects,
                "consumer_disconnects": self.consumer_disconnects,
            }

    def report(self, run_id):
        with self.lock:
            lost = sorted(self.acked - self.received)
            report = {
                "type": "report",
                "client": "python",
                "run_id": run_id,
                "sent": self.sent,
                "acked": len(self.acked),
                "max_acked_seq": max(self.acked) if self.acked else -1,
                "send_errors": self.send_errors,
                "worst_blocked_send_ms": self.worst * 1000.0,
                "received": self.deliveries,
                "unique_received": len(self.received),
                "duplicates": self.duplicates,
                "missing": len(lost),
                "missing_seqs": lost[:100],
                "reordered": self.reordered,
                "foreign": self.foreign,
                "producer_disconnects": self.producer_disconnects,
                "consumer_disconnects": self.consumer_disconnects,
            }
            if self.first_send_error is not None:
                report["first_send_error"] = self.first_send_error
            return report


def parse(argv):
    if len(argv) < 4:
        raise SystemExit("usage: traffic.py SERVICE_URL TOPIC SUBSCRIPTION RATE [options]")
    opts = {
        "url": argv[0],
        "topic": argv[1],
        "subscription": argv[2],
        "rate": float(argv[3]),
        "duration_ms": 0,
        "drain_ms": 10_000,
        "send_timeout_ms": 30_000,
        "run_id": "%x" % time.monotonic_ns(),
        "type": "Failover",
    }
    rest = list(argv[4:])
    while rest:
        flag = rest.pop(0)
        if flag == "--partitioned":
            continue
        names = {
            "--duration-ms": ("duration_ms", int),
            "--drain-ms": ("drain_ms", int),
            "--send-timeout-ms": ("send_timeout_ms", int),
            "--run-id": ("run_id", str),
            "--subscription-type": ("type", str),
        }
        if flag not in names or not rest:
            raise SystemExit("unknown option or missing value: " + flag)
        key, kind = names[flag]
        opts[key] = kind(rest.pop(0))
    if opts["rate"] <= 0:
        raise SystemExit("RATE must be above 0")
    return opts


def main():
    opts = parse(sys.argv[1:])
    run_id = opts["run_id"]
    t = Traffic(run_id)
    client = pulsar.Client(opts["url"], operation_timeout_seconds=30)
    consumer = client.subscribe(
        opts["topic"],
        opts["subscription"],
        consumer_type=getattr(pulsar.ConsumerType, opts["type"]),
        initial_position=pulsar.InitialPosition.Earliest,
        replicate_subscription_state_enabled=True,
    )
    producer = client.create_producer(
        opts["topic"],
        batching_enabled=False,
        block_if_queue_full=True,
        max_pending_messages=1000,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        send_timeout_millis=opts["send_timeout_ms"],
    )
    emit({"type": "ready", "client": "python", "run_id": run_id,
          "producer": producer.producer_name()})

    stop = threading.Event()
    stop_receiving = threading.Event()

    def read_stdin():
        try:
            for line in sys.stdin:
                if line.strip() == "stop":
                    break
        except Exception:  # a broken pipe is a close
            pass
        stop.set()

    def receive():
        while not stop_receiving.is_set():
            try:
                msg = consumer.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            except Exception as e:  # noqa: BLE001
                if not stop_receiving.is_set():
                    print("receive failed: %s" % e, file=sys.stderr)
                continue
            t.record(msg.topic_name(), msg.data().decode("utf-8", "replace"))
            consumer.acknowledge(msg)

    def watch():
        producer_up = consumer_up = True
        while not stop_receiving.is_set():
            p, c = producer.is_connected(), consumer.is_connected()
            with t.lock:
                if producer_up and not p:
                    t.producer_disconnects += 1
                if consumer_up and not c:
                    t.consumer_disconnects += 1
            producer_up, consumer_up = p, c
            time.sleep(0.01)

    def progress():
        while not stop_receiving.wait(0.2):
            emit(t.progress())

    threads = [threading.Thread(target=f, daemon=True) for f in (receive, watch, progress)]
    threading.Thread(target=read_stdin, daemon=True).start()
    for thread in threads:
        thread.start()

    start = time.monotonic()
    period = 1.0 / opts["rate"]
    deadline = start + opts["duration_ms"] / 1000.0 if opts["duration_ms"] > 0 else None
    seq = 0
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        wait = start + seq * period - time.monotonic()
        if wait > 0 and stop.wait(wait):
            break
        t0 = time.monotonic()
        with t.lock:
            t.sent += 1
            t.in_flight += 1
        payload = (t.prefix + str(seq)).encode("utf-8")
        try:
            producer.send_async(payload, lambda res, _id, n=seq, s=t0: t.completed(n, s, res))
        except Exception as e:  # noqa: BLE001
            t.completed(seq, t0, e)
        seq += 1

    flush_deadline = time.monotonic() + opts["send_timeout_ms"] / 1000.0 + 10
    while time.monotonic() < flush_deadline:
        with t.lock:
            if t.in_flight <= 0:
                break
        time.sleep(0.01)
    drain_deadline = time.monotonic() + opts["drain_ms"] / 1000.0
    while time.monotonic() < drain_deadline and not t.all_received():
        time.sleep(0.02)
    stop_receiving.set()
    for thread in threads:
        thread.join(2)
    emit(t.report(run_id))
    try:
        producer.close()
        consumer.close()
        client.close()
    except Exception as e:  # noqa: BLE001
        print("close failed: %s" % e, file=sys.stderr)
    OUT.flush()
    os._exit(0)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        emit({"type": "error", "message": repr(e)})
        OUT.flush()
        os._exit(1)
