/*
 * Licensed under the Apache License, Version 2.0.
 *
 * SimpleCopier: the simple Java copier of the harness's Java session (the
 * `copyFrom` command of BkInterop), kept as a baseline: one blocking thread per
 * copy, one read in flight per copy. `copies` ledgers at a time; each opened
 * without recovery, read in blocking batches of `window` entries, created with
 * createLedgerAdv under the same id, quorums and custom metadata, its entries
 * copied to byte arrays and added with their ids with at most `window` adds in
 * flight, then closed. PipelinedCopier is the strong one.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;

final class SimpleCopier {
    private SimpleCopier() {}

    static ObjectNode run(BookKeeper bk, BookKeeper src, JsonNode cmd) throws Exception {
        JsonNode ids = cmd.get("ledgerIds");
        if (ids == null || !ids.isArray()) {
            throw new BkInterop.HelperException("copyFrom needs ledgerIds, an array of ledger ids");
        }
        int copies = Math.max(1, BkInterop.integer(cmd, "copies", 1));
        int window = Math.max(1, BkInterop.integer(cmd, "window", 64));
        BookKeeper.DigestType digest = BkInterop.digest(cmd);
        byte[] password = BkInterop.bytes(cmd, "password");
        java.util.concurrent.ConcurrentLinkedQueue<Long> queue = new java.util.concurrent.ConcurrentLinkedQueue<>();
        for (JsonNode id : ids) {
            queue.add(id.asLong());
        }
        int ledgers = queue.size();
        AtomicLong entries = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(copies);
        List<java.util.concurrent.Future<?>> workers = new ArrayList<>();
        final BookKeeper source = src;
        long start = System.nanoTime();
        for (int w = 0; w < copies; w++) {
            workers.add(pool.submit(() -> {
                Long id;
                while ((id = queue.poll()) != null) {
                    copyOne(bk, source, id, digest, password, window, entries, bytes);
                }
                return null;
            }));
        }
        try {
            for (java.util.concurrent.Future<?> f : workers) {
                try {
                    f.get();
                } catch (ExecutionException e) {
                    throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
                }
            }
        } finally {
            pool.shutdownNow();
        }
        double seconds = Math.max(System.nanoTime() - start, 1) / 1e9;
        ObjectNode r = BkInterop.ok();
        r.put("ledgers", ledgers);
        r.put("entries", entries.get());
        r.put("bytes", bytes.get());
        r.put("seconds", seconds);
        r.put("mibPerSec", bytes.get() / (1024.0 * 1024.0) / seconds);
        return r;
    }

    /** Whether the session's --conf settings turn BookKeeper's batched reads on. */
    private static void copyOne(BookKeeper bk, BookKeeper source, long id, BookKeeper.DigestType digest, byte[] password,
            int window, AtomicLong entries, AtomicLong bytes) throws Exception {
        LedgerHandle in = source.openLedgerNoRecovery(id, digest, password);
        LedgerMetadata md = in.getLedgerMetadata();
        LedgerHandle out = bk.createLedgerAdv(id, md.getEnsembleSize(), md.getWriteQuorumSize(),
                md.getAckQuorumSize(), digest, password, md.getCustomMetadata());
        long lac = in.getLastAddConfirmed();
        Semaphore inFlight = new Semaphore(window);
        AtomicInteger failure = new AtomicInteger(BKException.Code.OK);
        for (long first = 0; first <= lac && failure.get() == BKException.Code.OK; first += window) {
            long last = Math.min(lac, first + window - 1);
            Enumeration<LedgerEntry> batch = in.readEntries(first, last);
            while (batch.hasMoreElements()) {
                LedgerEntry e = batch.nextElement();
                byte[] data = e.getEntry();
                inFlight.acquire();
                out.asyncAddEntry(e.getEntryId(), data, (rc, h, entryId, ctx) -> {
                    if (rc != BKException.Code.OK) {
                        failure.compareAndSet(BKException.Code.OK, rc);
                    }
                    inFlight.release();
                }, null);
                entries.incrementAndGet();
                bytes.addAndGet(data.length);
            }
        }
        inFlight.acquire(window);
        in.close();
        if (failure.get() != BKException.Code.OK) {
            throw BKException.create(failure.get());
        }
        out.close();
    }
}
