/*
 * Licensed under the Apache License, Version 2.0.
 *
 * PipelinedCopier: the strongest id-preserving ledger copy the harness's Java
 * session knows how to write with BookKeeper's public client (the `copyPipelined`
 * command of BkInterop).
 *
 * Everything runs on the client's own threads: no thread per copy, no blocking
 * call. `copies` ledgers are copied at once; when one finishes the next starts.
 * For each ledger:
 *   1. open without recovery (new API, withRecovery(false)): for a closed ledger
 *      the last entry id is in its metadata, so no LAC is read from the bookies;
 *   2. create it on the session's cluster with makeAdv() under the same id, the
 *      same quorums, digest, password and custom metadata;
 *   3. keep at most `window` entries in flight (read requested and not yet
 *      acknowledged by the destination): whenever the window has room for a read
 *      of `readBatch` entries one is issued (several reads in flight), and as soon
 *      as a read completes each entry's buffer is handed to writeAsync as it is,
 *      retained, without copying it; every acknowledgement frees a slot and may
 *      issue the next read, so reads and adds overlap all the time;
 *   4. close the copy, then the source handle.
 *
 * Reads use readAsync (confirmed entries: every entry of a closed ledger is).
 * BookKeeper 4.17's batched reads (batchReadAsync, batchReadEnabled) and sticky
 * reads apply only to ledgers whose ensemble equals their write quorum
 * (LedgerHandle.notSupportBatchRead / the sticky-read check); for others
 * batchReadAsync falls back to readAsync. This copier calls batchReadAsync when
 * the ledger qualifies and the client enables it, readAsync otherwise.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.netty.buffer.ByteBuf;
import java.util.ArrayDeque;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.ReadHandle;
import org.apache.bookkeeper.client.api.WriteAdvHandle;

final class PipelinedCopier {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final BookKeeper dst;
    private final BookKeeper src;
    private final DigestType digest;
    private final byte[] password;
    private final int window;
    private final int readBatch;
    private final boolean batchReads;
    private final ArrayDeque<Long> queue = new ArrayDeque<>();
    private final AtomicLong entries = new AtomicLong();
    private final AtomicLong bytes = new AtomicLong();
    private final CompletableFuture<Void> done = new CompletableFuture<>();
    private int running;

    private PipelinedCopier(BookKeeper dst, BookKeeper src, JsonNode cmd, boolean batchReads) {
        this.dst = dst;
        this.src = src;
        String d = cmd.path("digest").asText("CRC32C");
        this.digest = DigestType.valueOf(d.equals("CRC32C") || d.isEmpty() ? "CRC32C" : d);
        String pw = cmd.path("password").asText("");
        this.password = Base64.getDecoder().decode(pw);
        this.window = Math.max(1, cmd.path("window").asInt(64));
        this.readBatch = Math.max(1, Math.min(window, cmd.path("readBatch").asInt(Math.max(1, window / 4))));
        this.batchReads = batchReads;
        for (JsonNode id : cmd.path("ledgerIds")) {
            queue.add(id.asLong());
        }
    }

    /**
     * Runs the command; answers like the other commands of the session. `batchReads`: the
     * source client has batchReadEnabled set.
     */
    static ObjectNode run(BookKeeper dst, BookKeeper src, JsonNode cmd, boolean batchReads) throws Throwable {
        if (!cmd.path("ledgerIds").isArray()) {
            throw new BkInterop.HelperException("copyPipelined needs ledgerIds, an array of ledger ids");
        }
        PipelinedCopier c = new PipelinedCopier(dst, src, cmd, batchReads);
        int ledgers = c.queue.size();
        int copies = Math.max(1, cmd.path("copies").asInt(1));
        long start = System.nanoTime();
        synchronized (c) {
            if (c.queue.isEmpty()) {
                c.done.complete(null);
            }
            for (int i = 0; i < copies && !c.queue.isEmpty(); i++) {
                c.startNext();
            }
        }
        try {
            c.done.get(1, TimeUnit.HOURS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw e.getCause();
        }
        double seconds = Math.max(System.nanoTime() - start, 1) / 1e9;
        ObjectNode r = JSON.createObjectNode();
        r.put("ok", true);
        r.put("ledgers", ledgers);
        r.put("entries", c.entries.get());
        r.put("bytes", c.bytes.get());
        r.put("seconds", seconds);
        r.put("mibPerSec", c.bytes.get() / (1024.0 * 1024.0) / seconds);
        r.put("epoll", io.netty.channel.epoll.Epoll.isAvailable());
        return r;
    }

    /** Starts the next queued copy (called holding this). */
    private void startNext() {
        Long id = queue.poll();
        if (id == null) {
            if (running == 0) {
                done.complete(null);
            }
            return;
        }
        running++;
        copyOne(id).whenComplete((ok, err) -> {
            synchronized (this) {
                running--;
                if (err != null) {
                    done.completeExceptionally(err instanceof java.util.concurrent.CompletionException
                            && err.getCause() != null ? err.getCause() : err);
                    queue.clear();
                    return;
                }
                startNext();
            }
        });
    }

    private CompletableFuture<Void> copyOne(long id) {
        return src.newOpenLedgerOp()
                .withLedgerId(id)
                .withRecovery(false)
                .withDigestType(digest)
                .withPassword(password)
                .execute()
                .thenCompose(in -> {
                    LedgerMetadata md = in.getLedgerMetadata();
                    Map<String, byte[]> custom = new HashMap<>(md.getCustomMetadata());
                    return dst.newCreateLedgerOp()
                            .withEnsembleSize(md.getEnsembleSize())
                            .withWriteQuorumSize(md.getWriteQuorumSize())
                            .withAckQuorumSize(md.getAckQuorumSize())
                            .withDigestType(digest)
                            .withPassword(password)
                            .withCustomMetadata(custom)
                            .makeAdv()
                            .withLedgerId(id)
                            .execute()
                            .thenCompose(out -> new Stream(in, out, md).run()
                                    .thenCompose(v -> out.closeAsync()))
                            .whenComplete((v, e) -> in.closeAsync());
                });
    }

    /** One ledger's entries, `window` in flight. */
    private final class Stream {
        private final ReadHandle in;
        private final WriteAdvHandle out;
        private final long last;
        private final boolean batched;
        private final CompletableFuture<Void> finished = new CompletableFuture<>();
        private long nextRead;
        private int inFlight;
        private long acked;

        Stream(ReadHandle in, WriteAdvHandle out, LedgerMetadata md) {
            this.in = in;
            this.out = out;
            this.last = md.isClosed() ? md.getLastEntryId() : in.getLastAddConfirmed();
            this.batched = batchReads && md.getEnsembleSize() == md.getWriteQuorumSize();
        }

        CompletableFuture<Void> run() {
            pump();
            return finished;
        }

        /** Issues every read the window has room for. */
        private synchronized void pump() {
            if (finished.isDone()) {
                return;
            }
            if (acked == last + 1) {
                finished.complete(null);
                return;
            }
            while (nextRead <= last) {
                int n = (int) Math.min(readBatch, last - nextRead + 1);
                if (inFlight + n > window) {
                    return;
                }
                long first = nextRead;
                nextRead += n;
                inFlight += n;
                read(first, n);
            }
        }

        /** Reads `n` entries from `first` and hands them to the destination. */
        private void read(long first, int n) {
            CompletableFuture<LedgerEntries> read = batched
                    ? in.batchReadAsync(first, n, (long) n * 1024 * 1024)
                    : in.readAsync(first, first + n - 1);
            read.whenComplete((entries, err) -> onRead(first, n, entries, err));
        }

        private void onRead(long first, int n, LedgerEntries read, Throwable err) {
            if (err != null) {
                finished.completeExceptionally(err);
                return;
            }
            int got = 0;
            try {
                for (LedgerEntry e : read) {
                    got++;
                    ByteBuf data = e.getEntryBuffer().retain();
                    int length = data.readableBytes();
                    out.writeAsync(e.getEntryId(), data).whenComplete((r, t) -> onAck(t, length));
                }
            } finally {
                read.close();
            }
            if (got < n) {
                // A batched read stops at its size bound: read the rest.
                read(first + got, n - got);
            }
        }

        private void onAck(Throwable err, int length) {
            if (err != null) {
                finished.completeExceptionally(err);
                return;
            }
            entries.incrementAndGet();
            bytes.addAndGet(length);
            synchronized (this) {
                inFlight--;
                acked++;
            }
            pump();
        }
    }
}
