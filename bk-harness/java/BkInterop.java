/*
 * Licensed under the Apache License, Version 2.0.
 *
 * BkInterop: a JSON-lines session over Apache BookKeeper's public Java client,
 * used by bkswitch's BookKeeper test harness (bk-harness) to check that other
 * clients interoperate with the Java one.
 *
 *   java -cp <classes>:<bookkeeper lib>/* BkInterop <metadataServiceUri> [--v3] [--conf key=value]...
 *
 * The client speaks the v2 wire protocol by default (as Pulsar brokers do);
 * --v3 selects the protobuf protocol. Each --conf sets one ClientConfiguration
 * property.
 *
 * Protocol: one JSON object per line on stdin, one JSON object per line on
 * stdout, in order. Once the client is connected the session prints
 * {"ok":true,"ready":true,...}. Every answer is {"ok":true, ...} or
 * {"ok":false,"code":<BKException code>,"error":"<message>"}; an "id" field of
 * a command is echoed in its answer. Code -10001 means the helper itself refused
 * the command (bad or missing field, unknown ledger handle, unexpected Java
 * exception). Byte strings are base64 (standard alphabet, padded). Logs go to
 * stderr (log4j2 at WARN unless -Dbkinterop.logLevel or a log4j2 configuration
 * file says otherwise); stdout carries answers only. The session ends on
 * "quit" or at the end of stdin.
 *
 * Commands (ledger handles are kept by ledger id inside the session):
 *   create   {ensemble, writeQuorum, ackQuorum, digest, password, customMetadata:{k:b64},
 *             ledgerId?: long (createLedgerAdv), adv?: bool (createLedgerAdv, generated id)}
 *            -> {ledgerId}
 *   add      {ledgerId, data, entryId?: long (adv handles)} -> {entryId}
 *   addMany  {ledgerId, count, size?, payloads?: [b64], firstEntryId? (adv), inflight?}
 *            -> {lastEntryId}   (pipelined asynchronous adds; see payload())
 *   close    {ledgerId} -> {}
 *   open     {ledgerId, recovery, digest, password} -> {lac, closed, length, lastEntryId}
 *   read     {ledgerId, first, last, unconfirmed?} -> {entries: [{entryId, data}]}
 *   lac      {ledgerId} -> {lac}   (readLastAddConfirmed on the session's handle)
 *   delete   {ledgerId} -> {}
 *   metadata {ledgerId} -> every LedgerMetadata field, read from the metadata store
 *   benchAdd {entries, size, inflight, ensemble, writeQuorum, ackQuorum, digest?, password?}
 *            -> {ledgerId, entries, seconds, entriesPerSec, mibPerSec, p50Micros, p99Micros}
 *   benchRead {ledgerId, batch, digest?, password?} -> {entries, seconds, entriesPerSec, mibPerSec}
 *   benchRandomRead {ledgerId, count, inflight, digest?, password?}
 *            -> {entries, seconds, entriesPerSec, mibPerSec}   (single entries at random ids)
 *   copyFrom {sourceUri, ledgerIds: [long], copies, window, digest?, password?}
 *            -> {ledgers, entries, bytes, seconds, mibPerSec}
 *            (the simple Java copier, one blocking thread per copy: from the cluster at
 *            sourceUri into the session's cluster, `copies` ledgers at a time; each opened
 *            without recovery, read in blocking batches of `window` entries (one read in
 *            flight), created with createLedgerAdv under the same id, quorums and custom
 *            metadata, its entries copied to byte arrays and added with their ids with at
 *            most `window` adds in flight, then closed)
 *   copyPipelined {sourceUri, ledgerIds: [long], copies, window, readBatch?, digest?, password?}
 *            -> {ledgers, entries, bytes, seconds, mibPerSec, epoll}
 *            (the strongest Java copier: fully asynchronous on the client's own threads, no
 *            thread per copy; `copies` ledgers at a time; each opened without recovery (a
 *            closed ledger's last entry id comes from its metadata: no LAC read), created
 *            with the new API's makeAdv under the same id, quorums and custom metadata;
 *            reads of `readBatch` entries (default window / 4) are issued whenever the
 *            ledger's window has room for one, several in flight, and each entry's buffer
 *            is handed to writeAsync as it is (no copy) as soon as its read completes, so
 *            reads and adds overlap with at most `window` entries in flight per ledger
 *            (read requested and not yet acknowledged); then closed. `epoll` says whether
 *            Netty's native epoll transport is available to the client)
 *   ping     {} -> {}
 *   quit     {} -> {} and the process exits
 * Digests: "CRC32", "CRC32C" (default), "MAC", "DUMMY". Passwords default to empty.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.bookkeeper.client.AsyncCallback;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.net.BookieId;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.appender.ConsoleAppender;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;

public final class BkInterop {
    /** Code of failures of the helper itself (not a BookKeeper code). */
    static final int HELPER_ERROR = -10001;

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();

    private final BookKeeper bk;
    private final Map<Long, LedgerHandle> handles = new HashMap<>();
    /** Clients of other clusters (copyFrom sources), by metadata service URI. */
    private final Map<String, BookKeeper> sources = new HashMap<>();
    /** The session's protocol and --conf settings, for the source clients. */
    private static boolean useV3;
    private static final List<String[]> EXTRA_CONF = new ArrayList<>();

    private BkInterop(BookKeeper bk) {
        this.bk = bk;
    }

    /** A command the helper refuses (answered with HELPER_ERROR). */
    static final class HelperException extends Exception {
        private static final long serialVersionUID = 1L;

        HelperException(String message) {
            super(message);
        }
    }

    public static void main(String[] args) throws Exception {
        // stdout carries answers only: everything else that prints to
        // System.out goes to stderr.
        PrintStream out =
                new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        configureLogging();

        String uri = null;
        boolean v3 = false;
        List<String[]> extra = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--v3")) {
                v3 = true;
            } else if (a.equals("--v2")) {
                v3 = false;
            } else if (a.equals("--conf") && i + 1 < args.length) {
                String kv = args[++i];
                int eq = kv.indexOf('=');
                if (eq <= 0) {
                    fatal(out, "--conf expects key=value, got " + kv);
                }
                extra.add(new String[] {kv.substring(0, eq), kv.substring(eq + 1)});
            } else if (uri == null && !a.startsWith("--")) {
                uri = a;
            } else {
                fatal(out, "usage: BkInterop <metadataServiceUri> [--v3] [--conf key=value]...; bad argument " + a);
            }
        }
        if (uri == null) {
            fatal(out, "usage: BkInterop <metadataServiceUri> [--v3] [--conf key=value]...");
        }

        useV3 = v3;
        EXTRA_CONF.addAll(extra);
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        conf.setUseV2WireProtocol(!v3);
        for (String[] kv : extra) {
            conf.setProperty(kv[0], kv[1]);
        }
        BookKeeper bk;
        try {
            bk = new BookKeeper(conf);
        } catch (Throwable t) {
            ObjectNode err = error(t);
            err.put("ready", false);
            respond(out, err);
            out.flush();
            Runtime.getRuntime().halt(1);
            return;
        }
        BkInterop session = new BkInterop(bk);

        ObjectNode ready = ok();
        ready.put("ready", true);
        ready.put("uri", uri);
        ready.put("protocol", v3 ? "v3" : "v2");
        respond(out, ready);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer;
            JsonNode id = null;
            boolean quit = false;
            try {
                JsonNode cmd = JSON.readTree(line);
                if (cmd == null || !cmd.isObject()) {
                    throw new HelperException("a command is a JSON object");
                }
                id = cmd.get("id");
                String name = text(cmd, "cmd");
                quit = name.equals("quit");
                answer = quit ? ok() : session.run(name, cmd);
            } catch (Throwable t) {
                answer = error(t);
            }
            if (id != null) {
                answer.set("id", id);
            }
            respond(out, answer);
            if (quit) {
                break;
            }
        }
        out.flush();
        Runtime.getRuntime().halt(0);
    }

    private static void fatal(PrintStream out, String message) {
        ObjectNode err = JSON.createObjectNode();
        err.put("ok", false);
        err.put("ready", false);
        err.put("code", HELPER_ERROR);
        err.put("error", message);
        respond(out, err);
        out.flush();
        Runtime.getRuntime().halt(2);
    }

    private static void configureLogging() {
        if (System.getProperty("log4j2.configurationFile") != null
                || System.getProperty("log4j.configurationFile") != null) {
            return;
        }
        Level level = Level.toLevel(System.getProperty("bkinterop.logLevel", "WARN"), Level.WARN);
        ConfigurationBuilder<BuiltConfiguration> b = ConfigurationBuilderFactory.newConfigurationBuilder();
        b.setStatusLevel(Level.ERROR);
        b.setConfigurationName("bk-interop");
        b.add(b.newAppender("stderr", "Console")
                .addAttribute("target", ConsoleAppender.Target.SYSTEM_ERR)
                .add(b.newLayout("PatternLayout")
                        .addAttribute("pattern", "%d{HH:mm:ss.SSS} %-5level [%t] %c{1} - %msg%n")));
        b.add(b.newRootLogger(level).add(b.newAppenderRef("stderr")));
        Configurator.initialize(b.build());
    }

    private static void respond(PrintStream out, ObjectNode answer) {
        try {
            out.print(JSON.writeValueAsString(answer));
        } catch (Exception e) {
            out.print("{\"ok\":false,\"code\":" + HELPER_ERROR + ",\"error\":\"cannot encode the answer\"}");
        }
        out.print('\n');
        out.flush();
    }

    private ObjectNode run(String name, JsonNode cmd) throws Exception {
        switch (name) {
            case "ping":
                return ok();
            case "create":
                return create(cmd);
            case "add":
                return add(cmd);
            case "addMany":
                return addMany(cmd);
            case "close":
                return close(cmd);
            case "open":
                return open(cmd);
            case "read":
                return read(cmd);
            case "lac":
                return lac(cmd);
            case "delete":
                return delete(cmd);
            case "metadata":
                return metadata(cmd);
            case "benchAdd":
                return benchAdd(cmd);
            case "benchRead":
                return benchRead(cmd);
            case "benchRandomRead":
                return benchRandomRead(cmd);
            case "copyFrom":
                return SimpleCopier.run(bk, sourceClient(text(cmd, "sourceUri")), cmd);
            case "copyPipelined":
                try {
                    return PipelinedCopier.run(bk, sourceClient(text(cmd, "sourceUri")), cmd, batchReadEnabled());
                } catch (Exception | Error e) {
                    throw e;
                } catch (Throwable t) {
                    throw new RuntimeException(t);
                }
            default:
                throw new HelperException("unknown command " + name);
        }
    }

    // ---- commands ------------------------------------------------------------

    private ObjectNode create(JsonNode cmd) throws Exception {
        int ensemble = integer(cmd, "ensemble", 3);
        int writeQuorum = integer(cmd, "writeQuorum", Math.min(2, ensemble));
        int ackQuorum = integer(cmd, "ackQuorum", writeQuorum);
        BookKeeper.DigestType digest = digest(cmd);
        byte[] password = bytes(cmd, "password");
        Map<String, byte[]> custom = new HashMap<>();
        JsonNode cm = cmd.get("customMetadata");
        if (cm != null && !cm.isNull()) {
            if (!cm.isObject()) {
                throw new HelperException("customMetadata must be an object of base64 strings");
            }
            Iterator<Map.Entry<String, JsonNode>> fields = cm.fields();
            while (fields.hasNext()) {
                Map.Entry<String, JsonNode> f = fields.next();
                custom.put(f.getKey(), UNB64.decode(f.getValue().asText()));
            }
        }
        LedgerHandle lh;
        if (cmd.hasNonNull("ledgerId")) {
            lh = bk.createLedgerAdv(
                    longValue(cmd, "ledgerId"), ensemble, writeQuorum, ackQuorum, digest, password, custom);
        } else if (cmd.path("adv").asBoolean(false)) {
            lh = bk.createLedgerAdv(ensemble, writeQuorum, ackQuorum, digest, password, custom);
        } else {
            lh = bk.createLedger(ensemble, writeQuorum, ackQuorum, digest, password, custom);
        }
        handles.put(lh.getId(), lh);
        ObjectNode r = ok();
        r.put("ledgerId", lh.getId());
        return r;
    }

    private ObjectNode add(JsonNode cmd) throws Exception {
        LedgerHandle lh = handle(cmd);
        byte[] data = bytes(cmd, "data");
        long entryId = cmd.hasNonNull("entryId")
                ? lh.addEntry(longValue(cmd, "entryId"), data)
                : lh.addEntry(data);
        ObjectNode r = ok();
        r.put("entryId", entryId);
        return r;
    }

    /**
     * The payload of the n-th entry of an addMany without payloads: the UTF-8
     * text "entry-n" without size, else size bytes where byte k is
     * (n * 31 + k) mod 256.
     */
    static byte[] payload(long n, int size) {
        if (size < 0) {
            return ("entry-" + n).getBytes(StandardCharsets.UTF_8);
        }
        byte[] b = new byte[size];
        for (int k = 0; k < size; k++) {
            b[k] = (byte) ((n * 31 + k) & 0xff);
        }
        return b;
    }

    private ObjectNode addMany(JsonNode cmd) throws Exception {
        LedgerHandle lh = handle(cmd);
        JsonNode payloads = cmd.get("payloads");
        boolean given = payloads != null && payloads.isArray();
        int count = given ? payloads.size() : integer(cmd, "count", -1);
        if (count < 0) {
            throw new HelperException("addMany needs count or payloads");
        }
        int size = cmd.hasNonNull("size") ? integer(cmd, "size", -1) : -1;
        boolean adv = cmd.hasNonNull("firstEntryId");
        long first = adv ? longValue(cmd, "firstEntryId") : 0;
        Semaphore window = new Semaphore(integer(cmd, "inflight", 1000));
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger failure = new AtomicInteger(BKException.Code.OK);
        AtomicLong last = new AtomicLong(lh.getLastAddPushed());
        AsyncCallback.AddCallback callback = (rc, h, entryId, ctx) -> {
            if (rc != BKException.Code.OK) {
                failure.compareAndSet(BKException.Code.OK, rc);
            } else {
                last.accumulateAndGet(entryId, Math::max);
            }
            window.release();
            done.countDown();
        };
        for (int i = 0; i < count; i++) {
            byte[] data = given ? UNB64.decode(payloads.get(i).asText()) : payload(i, size);
            window.acquire();
            if (failure.get() != BKException.Code.OK) {
                window.release();
                done.countDown();
                continue;
            }
            if (adv) {
                lh.asyncAddEntry(first + i, data, callback, null);
            } else {
                lh.asyncAddEntry(data, callback, null);
            }
        }
        done.await();
        if (failure.get() != BKException.Code.OK) {
            throw BKException.create(failure.get());
        }
        ObjectNode r = ok();
        r.put("lastEntryId", last.get());
        return r;
    }

    private ObjectNode close(JsonNode cmd) throws Exception {
        LedgerHandle lh = handle(cmd);
        handles.remove(lh.getId());
        lh.close();
        return ok();
    }

    private ObjectNode open(JsonNode cmd) throws Exception {
        long id = longValue(cmd, "ledgerId");
        boolean recovery = cmd.path("recovery").asBoolean(true);
        BookKeeper.DigestType digest = digest(cmd);
        byte[] password = bytes(cmd, "password");
        LedgerHandle lh = recovery
                ? bk.openLedger(id, digest, password)
                : bk.openLedgerNoRecovery(id, digest, password);
        handles.put(id, lh);
        ObjectNode r = ok();
        r.put("lac", lh.getLastAddConfirmed());
        r.put("closed", lh.isClosed());
        r.put("length", lh.getLength());
        r.put("lastEntryId", lh.getLedgerMetadata().getLastEntryId());
        return r;
    }

    private ObjectNode read(JsonNode cmd) throws Exception {
        LedgerHandle lh = handle(cmd);
        long first = longValue(cmd, "first");
        long last = longValue(cmd, "last");
        Enumeration<LedgerEntry> en = cmd.path("unconfirmed").asBoolean(false)
                ? lh.readUnconfirmedEntries(first, last)
                : lh.readEntries(first, last);
        ObjectNode r = ok();
        ArrayNode entries = r.putArray("entries");
        while (en.hasMoreElements()) {
            LedgerEntry e = en.nextElement();
            ObjectNode o = entries.addObject();
            o.put("entryId", e.getEntryId());
            o.put("data", B64.encodeToString(e.getEntry()));
        }
        return r;
    }

    private ObjectNode lac(JsonNode cmd) throws Exception {
        LedgerHandle lh = handle(cmd);
        ObjectNode r = ok();
        r.put("lac", lh.readLastConfirmed());
        return r;
    }

    private ObjectNode delete(JsonNode cmd) throws Exception {
        long id = longValue(cmd, "ledgerId");
        bk.deleteLedger(id);
        handles.remove(id);
        return ok();
    }

    private ObjectNode metadata(JsonNode cmd) throws Exception {
        long id = longValue(cmd, "ledgerId");
        LedgerMetadata md = bk.getLedgerMetadata(id).get();
        ObjectNode r = ok();
        r.put("ledgerId", md.getLedgerId());
        r.put("ensembleSize", md.getEnsembleSize());
        r.put("writeQuorumSize", md.getWriteQuorumSize());
        r.put("ackQuorumSize", md.getAckQuorumSize());
        r.put("digestType", md.getDigestType().name());
        r.put("hasPassword", md.hasPassword());
        r.put("password", B64.encodeToString(md.hasPassword() ? md.getPassword() : new byte[0]));
        ObjectNode custom = r.putObject("customMetadata");
        for (Map.Entry<String, byte[]> e : md.getCustomMetadata().entrySet()) {
            custom.put(e.getKey(), B64.encodeToString(e.getValue()));
        }
        r.put("state", md.getState().name());
        r.put("closed", md.isClosed());
        r.put("lastEntryId", md.getLastEntryId());
        r.put("length", md.getLength());
        r.put("ctime", md.getCtime());
        r.put("cToken", md.getCToken());
        r.put("metadataFormatVersion", md.getMetadataFormatVersion());
        ArrayNode ensembles = r.putArray("ensembles");
        for (Map.Entry<Long, ? extends List<BookieId>> e : md.getAllEnsembles().entrySet()) {
            ObjectNode seg = ensembles.addObject();
            seg.put("firstEntryId", e.getKey());
            ArrayNode bookies = seg.putArray("bookies");
            for (BookieId b : e.getValue()) {
                bookies.add(b.toString());
            }
        }
        return r;
    }

    private ObjectNode benchAdd(JsonNode cmd) throws Exception {
        int entries = integer(cmd, "entries", 10_000);
        int size = integer(cmd, "size", 1024);
        int inflight = Math.max(1, integer(cmd, "inflight", 100));
        int ensemble = integer(cmd, "ensemble", 3);
        int writeQuorum = integer(cmd, "writeQuorum", Math.min(2, ensemble));
        int ackQuorum = integer(cmd, "ackQuorum", writeQuorum);
        LedgerHandle lh = bk.createLedger(ensemble, writeQuorum, ackQuorum, digest(cmd), bytes(cmd, "password"));
        byte[] data = new byte[size];
        new Random(42).nextBytes(data);
        long[] latency = new long[entries];
        long[] sentAt = new long[entries];
        Semaphore window = new Semaphore(inflight);
        CountDownLatch done = new CountDownLatch(entries);
        AtomicInteger failure = new AtomicInteger(BKException.Code.OK);
        long start = System.nanoTime();
        for (int i = 0; i < entries; i++) {
            window.acquire();
            if (failure.get() != BKException.Code.OK) {
                window.release();
                done.countDown();
                continue;
            }
            final int index = i;
            final long sent = System.nanoTime();
            sentAt[index] = sent;
            lh.asyncAddEntry(data, (rc, h, entryId, ctx) -> {
                latency[index] = System.nanoTime() - sent;
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(BKException.Code.OK, rc);
                }
                window.release();
                done.countDown();
            }, null);
        }
        done.await();
        long elapsed = System.nanoTime() - start;
        if (failure.get() != BKException.Code.OK) {
            throw BKException.create(failure.get());
        }
        lh.close();
        // Each add timed from the moment the window let it go (the
        // completion that freed its permit, in completion order; the start
        // for the first window), not from the call: the wait of a freed
        // permit for this thread is part of the add's latency too. Without
        // it, a client whose issuing thread lags keeps fewer adds in flight
        // than the window and shows a shorter latency for it.
        long[] doneAt = new long[entries];
        long inFlightNanos = 0;
        for (int i = 0; i < entries; i++) {
            doneAt[i] = sentAt[i] + latency[i];
            inFlightNanos += latency[i];
        }
        long[] freedAt = doneAt.clone();
        Arrays.sort(freedAt);
        long[] fromWindow = new long[entries];
        for (int i = 0; i < entries; i++) {
            long freed = i < inflight ? start : Math.min(freedAt[i - inflight], sentAt[i]);
            fromWindow[i] = doneAt[i] - freed;
        }
        Arrays.sort(fromWindow);
        // BENCH_TRACE (the bench's setting): each add as "call completion",
        // ns from the start, in the order of the calls.
        String trace = System.getenv("BENCH_TRACE");
        if (trace != null && !trace.isEmpty()) {
            try (java.io.PrintWriter w = new java.io.PrintWriter(
                    new java.io.File(trace, System.currentTimeMillis() + "-java.txt"), "UTF-8")) {
                for (int i = 0; i < entries; i++) {
                    w.println((sentAt[i] - start) + " " + (doneAt[i] - start));
                }
            }
        }
        Arrays.sort(latency);
        double seconds = elapsed / 1e9;
        ObjectNode r = ok();
        r.put("ledgerId", lh.getId());
        r.put("entries", entries);
        r.put("seconds", seconds);
        r.put("entriesPerSec", entries / seconds);
        r.put("mibPerSec", (double) entries * size / (1024.0 * 1024.0) / seconds);
        r.put("p50Micros", entries == 0 ? 0 : latency[entries / 2] / 1000.0);
        r.put("p99Micros", entries == 0 ? 0 : latency[Math.min(entries - 1, (int) (entries * 99L / 100))] / 1000.0);
        r.put("windowP99Micros",
                entries == 0 ? 0 : fromWindow[Math.min(entries - 1, (int) (entries * 99L / 100))] / 1000.0);
        r.put("inFlight", elapsed == 0 ? 0 : (double) inFlightNanos / elapsed);
        return r;
    }

    /** Whether the session's --conf settings turn BookKeeper's batched reads on. */
    private static boolean batchReadEnabled() {
        boolean on = false;
        for (String[] kv : EXTRA_CONF) {
            if (kv[0].equals("batchReadEnabled")) {
                on = Boolean.parseBoolean(kv[1]);
            }
        }
        return on;
    }

    /** The client of the cluster at `sourceUri` (the session's settings), made once. */
    private BookKeeper sourceClient(String sourceUri) throws Exception {
        if (sourceUri.isEmpty()) {
            throw new HelperException("a copy needs sourceUri");
        }
        BookKeeper src = sources.get(sourceUri);
        if (src == null) {
            ClientConfiguration conf = new ClientConfiguration();
            conf.setMetadataServiceUri(sourceUri);
            conf.setUseV2WireProtocol(!useV3);
            for (String[] kv : EXTRA_CONF) {
                conf.setProperty(kv[0], kv[1]);
            }
            src = new BookKeeper(conf);
            sources.put(sourceUri, src);
        }
        return src;
    }

    private ObjectNode benchRead(JsonNode cmd) throws Exception {
        long id = longValue(cmd, "ledgerId");
        int batch = Math.max(1, integer(cmd, "batch", 100));
        LedgerHandle lh = bk.openLedgerNoRecovery(id, digest(cmd), bytes(cmd, "password"));
        long lac = lh.getLastAddConfirmed();
        long count = 0;
        long bytes = 0;
        long start = System.nanoTime();
        for (long first = 0; first <= lac; first += batch) {
            long last = Math.min(lac, first + batch - 1);
            Enumeration<LedgerEntry> en = lh.readEntries(first, last);
            while (en.hasMoreElements()) {
                // getLength() is the ledger length recorded with the entry, not
                // the payload's: count the payload.
                bytes += en.nextElement().getEntry().length;
                count++;
            }
        }
        long elapsed = System.nanoTime() - start;
        lh.close();
        double seconds = Math.max(elapsed, 1) / 1e9;
        ObjectNode r = ok();
        r.put("entries", count);
        r.put("seconds", seconds);
        r.put("entriesPerSec", count / seconds);
        r.put("mibPerSec", bytes / (1024.0 * 1024.0) / seconds);
        return r;
    }

    private ObjectNode benchRandomRead(JsonNode cmd) throws Exception {
        long id = longValue(cmd, "ledgerId");
        int count = Math.max(1, integer(cmd, "count", 1000));
        int inflight = Math.max(1, integer(cmd, "inflight", 64));
        LedgerHandle lh = bk.openLedgerNoRecovery(id, digest(cmd), bytes(cmd, "password"));
        long lac = lh.getLastAddConfirmed();
        Random random = new Random(7);
        Semaphore window = new Semaphore(inflight);
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger failure = new AtomicInteger(BKException.Code.OK);
        java.util.concurrent.atomic.AtomicLong bytes = new java.util.concurrent.atomic.AtomicLong();
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            window.acquire();
            long entry = (long) (random.nextDouble() * (lac + 1));
            lh.asyncReadEntries(entry, entry, (rc, h, seq, ctx) -> {
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(BKException.Code.OK, rc);
                } else {
                    while (seq.hasMoreElements()) {
                        bytes.addAndGet(seq.nextElement().getEntry().length);
                    }
                }
                window.release();
                done.countDown();
            }, null);
        }
        done.await();
        long elapsed = System.nanoTime() - start;
        lh.close();
        if (failure.get() != BKException.Code.OK) {
            throw BKException.create(failure.get());
        }
        double seconds = Math.max(elapsed, 1) / 1e9;
        ObjectNode r = ok();
        r.put("entries", count);
        r.put("seconds", seconds);
        r.put("entriesPerSec", count / seconds);
        r.put("mibPerSec", bytes.get() / (1024.0 * 1024.0) / seconds);
        return r;
    }

    // ---- helpers -------------------------------------------------------------

    private LedgerHandle handle(JsonNode cmd) throws HelperException {
        long id = longValue(cmd, "ledgerId");
        LedgerHandle lh = handles.get(id);
        if (lh == null) {
            throw new HelperException("ledger " + id + " is not open in this session (create or open it first)");
        }
        return lh;
    }

    static ObjectNode ok() {
        ObjectNode r = JSON.createObjectNode();
        r.put("ok", true);
        return r;
    }

    private static ObjectNode error(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) {
            c = c.getCause();
        }
        int code = HELPER_ERROR;
        if (c instanceof org.apache.bookkeeper.client.api.BKException) {
            code = ((org.apache.bookkeeper.client.api.BKException) c).getCode();
        }
        ObjectNode r = JSON.createObjectNode();
        r.put("ok", false);
        r.put("code", code);
        String message = c.getMessage();
        r.put("error", c.getClass().getSimpleName() + (message == null ? "" : ": " + message));
        return r;
    }

    private static String text(JsonNode cmd, String field) throws HelperException {
        JsonNode v = cmd.get(field);
        if (v == null || !v.isTextual()) {
            throw new HelperException("missing string field " + field);
        }
        return v.asText();
    }

    private static long longValue(JsonNode cmd, String field) throws HelperException {
        JsonNode v = cmd.get(field);
        if (v == null || !v.canConvertToLong()) {
            throw new HelperException("missing integer field " + field);
        }
        return v.asLong();
    }

    static int integer(JsonNode cmd, String field, int fallback) throws HelperException {
        JsonNode v = cmd.get(field);
        if (v == null || v.isNull()) {
            return fallback;
        }
        if (!v.canConvertToInt()) {
            throw new HelperException("field " + field + " must be a 32-bit integer");
        }
        return v.asInt();
    }

    static byte[] bytes(JsonNode cmd, String field) throws HelperException {
        JsonNode v = cmd.get(field);
        if (v == null || v.isNull()) {
            return new byte[0];
        }
        try {
            return UNB64.decode(v.asText());
        } catch (IllegalArgumentException e) {
            throw new HelperException("field " + field + " is not base64: " + e.getMessage());
        }
    }

    static BookKeeper.DigestType digest(JsonNode cmd) throws HelperException {
        String name = cmd.path("digest").asText("CRC32C");
        try {
            return BookKeeper.DigestType.valueOf(name);
        } catch (IllegalArgumentException e) {
            throw new HelperException("unknown digest " + name + " (CRC32, CRC32C, MAC, DUMMY)");
        }
    }
}
