/*
 * A Pulsar traffic client that measures what it sees, for the Pulsar harness
 * (the Rust side is pulsar-harness/src/traffic.rs). The same contract as
 * pulsar-harness/python/traffic.py:
 *
 *   java -cp <classes>:<pulsar lib>/* Traffic SERVICE_URL TOPIC SUBSCRIPTION RATE
 *        [--partitioned] [--duration-ms N] [--drain-ms N] [--run-id ID]
 *        [--subscription-type Failover|Exclusive] [--send-timeout-ms N]
 *
 * SERVICE_URL is pulsar://host:port or http://host:port (HTTP lookups). One
 * consumer (replicated subscription state, initial position Earliest, Failover
 * by default) receives and acknowledges every message; one producer (batching
 * off, round-robin over the partitions of a partitioned topic) sends RATE
 * messages a second, payload "<run-id>-<seq>" with seq from 0, each by
 * sendAsync, timed from the call until the broker's acknowledgement. It runs
 * until standard input says "stop" or closes, or the duration has passed;
 * then it waits for the sends in flight, drains the consumer (until every
 * acknowledged message arrived, or the drain time is over) and exits.
 *
 * Standard output carries JSON lines only (libraries' output goes to standard
 * error): {"type":"ready",...} once the consumer and producer exist,
 * {"type":"progress",...} every 200 ms, and a last {"type":"report",...}.
 * The report: sent (sends attempted), acked (acknowledged by the broker),
 * max_acked_seq (-1 for none), send_errors, first_send_error,
 * worst_blocked_send_ms (the longest time from a send to its acknowledgement
 * or failure), received (deliveries of this run's messages, duplicates
 * included), unique_received, duplicates, missing (acknowledged but never
 * received), missing_seqs (the first 100 of them), reordered (deliveries whose
 * seq is below the previous one of the same partition), foreign (deliveries of
 * other runs), producer_disconnects and consumer_disconnects (times the
 * handler was seen disconnected, sampled every 10 ms), connected_to (the
 * address the producer's connection ends at) and redirected_to (the cluster
 * URL a PIP-188 migration sent the producer to), both only when known.
 */

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.ClientCnx;
import org.apache.pulsar.client.impl.PartitionedProducerImpl;
import org.apache.pulsar.client.impl.ProducerImpl;

public final class Traffic {
    private static final PrintStream OUT =
            new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);

    private final Object lock = new Object();
    private final BitSet acked = new BitSet();
    private final BitSet received = new BitSet();
    private final Map<String, Long> lastSeq = new HashMap<>();
    private long sent;
    private long sendErrors;
    private String firstSendError;
    private long worstNanos;
    private long deliveries;
    private long duplicates;
    private long reordered;
    private long foreign;
    private final AtomicLong inFlight = new AtomicLong();
    private final AtomicLong producerDisconnects = new AtomicLong();
    private final AtomicLong consumerDisconnects = new AtomicLong();

    public static void main(String[] args) throws Exception {
        // Anything a library prints goes to the log, never into the JSON lines.
        System.setOut(System.err);
        try {
            new Traffic().run(args);
        } catch (Throwable t) {
            t.printStackTrace();
            OUT.println("{\"type\":\"error\",\"message\":" + quote(String.valueOf(t)) + "}");
            System.exit(1);
        }
        System.exit(0);
    }

    private void run(String[] args) throws Exception {
        if (args.length < 4) {
            throw new IllegalArgumentException(
                    "usage: Traffic SERVICE_URL TOPIC SUBSCRIPTION RATE [options]");
        }
        String url = args[0];
        String topic = args[1];
        String subscription = args[2];
        double rate = Double.parseDouble(args[3]);
        long durationMs = 0;
        long drainMs = 10_000;
        long sendTimeoutMs = 30_000;
        String runId = Long.toHexString(System.nanoTime());
        SubscriptionType type = SubscriptionType.Failover;
        for (int i = 4; i < args.length; i++) {
            switch (args[i]) {
                case "--partitioned": break;
                case "--duration-ms": durationMs = Long.parseLong(args[++i]); break;
                case "--drain-ms": drainMs = Long.parseLong(args[++i]); break;
                case "--send-timeout-ms": sendTimeoutMs = Long.parseLong(args[++i]); break;
                case "--run-id": runId = args[++i]; break;
                case "--subscription-type": type = SubscriptionType.valueOf(args[++i]); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (rate <= 0) {
            throw new IllegalArgumentException("RATE must be above 0");
        }

        PulsarClient client = PulsarClient.builder()
                .serviceUrl(url)
                .operationTimeout(30, TimeUnit.SECONDS)
                .build();
        Consumer<byte[]> consumer = client.newConsumer()
                .topic(topic)
                .subscriptionName(subscription)
                .subscriptionType(type)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .replicateSubscriptionState(true)
                .subscribe();
        Producer<byte[]> producer = client.newProducer()
                .topic(topic)
                .enableBatching(false)
                .blockIfQueueFull(true)
                .maxPendingMessages(1000)
                .messageRoutingMode(MessageRoutingMode.RoundRobinPartition)
                .sendTimeout((int) sendTimeoutMs, TimeUnit.MILLISECONDS)
                .create();
        OUT.println("{\"type\":\"ready\",\"client\":\"java\",\"run_id\":" + quote(runId)
                + ",\"producer\":" + quote(producer.getProducerName()) + "}");

        AtomicBoolean stop = new AtomicBoolean();
        AtomicBoolean stopReceiving = new AtomicBoolean();
        Thread stdin = daemon("stdin", () -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    // Anything else is ignored.
                }
            } catch (Exception e) {
                // A broken pipe is a close.
            }
            stop.set(true);
        });
        final String prefix = runId + "-";
        Thread receiver = daemon("receiver", () -> {
            while (!stopReceiving.get()) {
                try {
                    Message<byte[]> m = consumer.receive(100, TimeUnit.MILLISECONDS);
                    if (m == null) {
                        continue;
                    }
                    record(prefix, m.getTopicName(), new String(m.getData(), StandardCharsets.UTF_8));
                    consumer.acknowledgeAsync(m);
                } catch (Exception e) {
                    if (!stopReceiving.get()) {
                        System.err.println("receive failed: " + e);
                    }
                }
            }
        });
        Thread watcher = daemon("watcher", () -> {
            boolean producerUp = true;
            boolean consumerUp = true;
            while (!stopReceiving.get()) {
                boolean p = producer.isConnected();
                boolean c = consumer.isConnected();
                if (producerUp && !p) {
                    producerDisconnects.incrementAndGet();
                }
                if (consumerUp && !c) {
                    consumerDisconnects.incrementAndGet();
                }
                producerUp = p;
                consumerUp = c;
                sleep(10);
            }
        });
        Thread progress = daemon("progress", () -> {
            while (!stopReceiving.get()) {
                sleep(200);
                OUT.println(progressLine());
            }
        });
        stdin.start();
        receiver.start();
        watcher.start();
        progress.start();

        long start = System.nanoTime();
        long periodNanos = (long) (1e9 / rate);
        long deadline = durationMs > 0 ? start + durationMs * 1_000_000 : Long.MAX_VALUE;
        for (long seq = 0; !stop.get() && System.nanoTime() < deadline; seq++) {
            long due = start + seq * periodNanos;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                TimeUnit.NANOSECONDS.sleep(wait);
            }
            if (stop.get()) {
                break;
            }
            final long n = seq;
            final long t0 = System.nanoTime();
            synchronized (lock) {
                sent++;
            }
            inFlight.incrementAndGet();
            try {
                producer.sendAsync((prefix + n).getBytes(StandardCharsets.UTF_8))
                        .whenComplete((id, err) -> completed(n, t0, err));
            } catch (Exception e) {
                completed(n, t0, e);
            }
        }

        // The sends in flight end by an acknowledgement or their timeout.
        long flushDeadline = System.nanoTime() + (sendTimeoutMs + 10_000) * 1_000_000;
        while (inFlight.get() > 0 && System.nanoTime() < flushDeadline) {
            sleep(10);
        }
        long drainDeadline = System.nanoTime() + drainMs * 1_000_000;
        while (System.nanoTime() < drainDeadline && !allReceived()) {
            sleep(20);
        }
        stopReceiving.set(true);
        receiver.join(2_000);
        watcher.join(1_000);
        progress.join(1_000);
        String connectedTo = connectedTo(producer);
        String redirectedTo = redirectedTo(producer);
        OUT.println(report(runId, connectedTo, redirectedTo));
        try {
            producer.closeAsync().get(5, TimeUnit.SECONDS);
            consumer.closeAsync().get(5, TimeUnit.SECONDS);
            client.closeAsync().get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("close failed: " + e);
        }
    }

    private void completed(long seq, long t0, Throwable err) {
        long took = System.nanoTime() - t0;
        synchronized (lock) {
            worstNanos = Math.max(worstNanos, took);
            if (err == null) {
                acked.set((int) seq);
            } else {
                sendErrors++;
                if (firstSendError == null) {
                    firstSendError = String.valueOf(err);
                }
            }
        }
        inFlight.decrementAndGet();
    }

    private void record(String prefix, String partition, String payload) {
        synchronized (lock) {
            if (!payload.startsWith(prefix)) {
                foreign++;
                return;
            }
            long seq;
            try {
                seq = Long.parseLong(payload.substring(prefix.length()));
            } catch (NumberFormatException e) {
                foreign++;
                return;
            }
            deliveries++;
            if (received.get((int) seq)) {
                duplicates++;
            }
            received.set((int) seq);
            Long last = lastSeq.put(partition, seq);
            if (last != null && seq < last) {
                reordered++;
            }
        }
    }

    private boolean allReceived() {
        synchronized (lock) {
            BitSet lost = (BitSet) acked.clone();
            lost.andNot(received);
            return lost.isEmpty();
        }
    }

    private String progressLine() {
        synchronized (lock) {
            return "{\"type\":\"progress\",\"sent\":" + sent + ",\"acked\":" + acked.cardinality()
                    + ",\"send_errors\":" + sendErrors + ",\"received\":" + deliveries
                    + ",\"unique_received\":" + received.cardinality()
                    + ",\"producer_disconnects\":" + producerDisconnects.get()
                    + ",\"consumer_disconnects\":" + consumerDisconnects.get() + "}";
        }
    }

    private String report(String runId, String connectedTo, String redirectedTo) {
        synchronized (lock) {
            BitSet lost = (BitSet) acked.clone();
            lost.andNot(received);
            List<String> sample = new ArrayList<>();
            for (int i = lost.nextSetBit(0); i >= 0 && sample.size() < 100; i = lost.nextSetBit(i + 1)) {
                sample.add(Integer.toString(i));
            }
            StringBuilder b = new StringBuilder("{\"type\":\"report\",\"client\":\"java\"");
            b.append(",\"run_id\":").append(quote(runId));
            b.append(",\"sent\":").append(sent);
            b.append(",\"acked\":").append(acked.cardinality());
            b.append(",\"max_acked_seq\":").append(acked.length() - 1);
            b.append(",\"send_errors\":").append(sendErrors);
            if (firstSendError != null) {
                b.append(",\"first_send_error\":").append(quote(firstSendError));
            }
            b.append(",\"worst_blocked_send_ms\":").append(worstNanos / 1e6);
            b.append(",\"received\":").append(deliveries);
            b.append(",\"unique_received\":").append(received.cardinality());
            b.append(",\"duplicates\":").append(duplicates);
            b.append(",\"missing\":").append(lost.cardinality());
            b.append(",\"missing_seqs\":[").append(String.join(",", sample)).append(']');
            b.append(",\"reordered\":").append(reordered);
            b.append(",\"foreign\":").append(foreign);
            b.append(",\"producer_disconnects\":").append(producerDisconnects.get());
            b.append(",\"consumer_disconnects\":").append(consumerDisconnects.get());
            if (connectedTo != null) {
                b.append(",\"connected_to\":").append(quote(connectedTo));
            }
            if (redirectedTo != null) {
                b.append(",\"redirected_to\":").append(quote(redirectedTo));
            }
            return b.append('}').toString();
        }
    }

    private static List<ProducerImpl<?>> parts(Producer<?> producer) {
        List<ProducerImpl<?>> parts = new ArrayList<>();
        if (producer instanceof ProducerImpl) {
            parts.add((ProducerImpl<?>) producer);
        } else if (producer instanceof PartitionedProducerImpl) {
            parts.addAll(((PartitionedProducerImpl<?>) producer).getProducers());
        }
        return parts;
    }

    /** Where the (first partition's) producer connection ends: host:port. */
    private static String connectedTo(Producer<?> producer) {
        try {
            for (ProducerImpl<?> part : parts(producer)) {
                ClientCnx cnx = part.getClientCnx();
                if (cnx == null || cnx.ctx() == null) {
                    continue;
                }
                SocketAddress remote = cnx.ctx().channel().remoteAddress();
                if (remote instanceof InetSocketAddress) {
                    InetSocketAddress inet = (InetSocketAddress) remote;
                    return inet.getAddress().getHostAddress() + ":" + inet.getPort();
                }
            }
        } catch (Exception e) {
            System.err.println("cannot read the producer's connection: " + e);
        }
        return null;
    }

    /** The cluster URL a PIP-188 migration redirected the producer to. */
    private static String redirectedTo(Producer<?> producer) {
        try {
            Field field = Class.forName("org.apache.pulsar.client.impl.HandlerState")
                    .getDeclaredField("redirectedClusterURI");
            field.setAccessible(true);
            for (ProducerImpl<?> part : parts(producer)) {
                Object uri = field.get(part);
                if (uri != null) {
                    return uri.toString();
                }
            }
        } catch (Exception e) {
            System.err.println("cannot read the producer's redirection: " + e);
        }
        return null;
    }

    private static Thread daemon(String name, Runnable body) {
        Thread thread = new Thread(body, "traffic-" + name);
        thread.setDaemon(true);
        return thread;
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }
}
