/*
 * Apache Pulsar's own metadata store (pulsar-metadata's `MetadataStoreExtended`,
 * opened by URL exactly as a broker opens it: `etcd:http://host:port` gives
 * `EtcdMetadataStore`, `zk:host:port` `ZKMetadataStore`) as the judge of the
 * layout bkswitch keeps, and the Java side of the metadata-store bench.
 *
 *   java -cp <classes>:<pulsar-metadata lib>/* PulsarMetadata <url> [--batching]
 *
 * `--batching` keeps Pulsar's default operation batching (a broker's
 * `metadataStoreBatchingEnabled=true`: operations wait up to 5 ms to be sent
 * together); without it every operation is sent at once. Run by
 * bkswitch-bk-harness (`PulsarMetadataStore`). Prints {"ready":true} once the
 * store is open, then reads one JSON command per line on stdin and answers one
 * JSON line each on stdout (with the command's "id"), until stdin ends or
 * "quit". Values are hex.
 *
 *   {"cmd":"get","path":P}
 *       -> {"ok":true,"found":bool,"value":hex,"version":n,"ephemeral":b,"createdBySelf":b}
 *   {"cmd":"put","path":P,"value":hex,"expectedVersion":n|null,"ephemeral":b,"sequential":b}
 *       -> {"ok":true,"path":path written,"version":n}  (n: Pulsar's Stat.getVersion())
 *   {"cmd":"delete","path":P,"expectedVersion":n|null} -> {"ok":true}
 *   {"cmd":"exists","path":P} -> {"ok":true,"exists":b}
 *   {"cmd":"children","path":P} -> {"ok":true,"children":[...]}  (read from the store,
 *       not Pulsar's children cache)
 *   {"cmd":"bench","op":"get"|"put","keys":[P...],"iters":n,"size":s}
 *       -> {"ok":true,"nanos":n}  n operations in keys.length lanes, each lane one
 *          key, one operation in flight per lane; a put writes s bytes with the
 *          version the lane's previous write returned (the first from a get,
 *          before the clock starts).
 *   {"cmd":"close"} closes the store (its lease is revoked: its ephemeral
 *       nodes go) -> {"ok":true}
 *   {"cmd":"quit"}
 *   failures -> {"ok":false,"error":"...","kind":simple class name of the cause}
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import org.apache.pulsar.metadata.api.GetResult;
import org.apache.pulsar.metadata.api.MetadataStoreConfig;
import org.apache.pulsar.metadata.api.Stat;
import org.apache.pulsar.metadata.api.extended.CreateOption;
import org.apache.pulsar.metadata.api.extended.MetadataStoreExtended;

public final class PulsarMetadata {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HexFormat HEX = HexFormat.of();

    private static MetadataStoreExtended store;
    /** The answers' stream; everything else (libraries' logs) goes to stderr. */
    private static final java.io.PrintStream OUT = System.out;

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: PulsarMetadata <metadata store url> [--batching]");
            System.exit(2);
        }
        boolean batching = args.length > 1 && args[1].equals("--batching");
        System.setOut(System.err);
        MetadataStoreConfig conf = MetadataStoreConfig.builder()
                .metadataStoreName("bkswitch-judge")
                .sessionTimeoutMillis(30_000)
                .batchingEnabled(batching)
                .build();
        try {
            store = MetadataStoreExtended.create(args[0], conf);
        } catch (Throwable t) {
            ObjectNode out = JSON.createObjectNode();
            out.put("ready", false);
            out.put("error", describe(t));
            OUT.println(JSON.writeValueAsString(out));
            OUT.flush();
            System.exit(1);
        }
        OUT.println("{\"ready\":true}");
        OUT.flush();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        boolean closed = false;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode out;
            JsonNode cmd = null;
            try {
                cmd = JSON.readTree(line);
                if (cmd.get("cmd").asText().equals("quit")) {
                    out = ok();
                    out.set("id", cmd.get("id"));
                    OUT.println(JSON.writeValueAsString(out));
                    OUT.flush();
                    break;
                }
                if (cmd.get("cmd").asText().equals("close")) {
                    if (!closed) {
                        store.close();
                        closed = true;
                    }
                    out = ok();
                } else {
                    out = handle(cmd);
                }
            } catch (Throwable t) {
                Throwable cause = unwrap(t);
                out = JSON.createObjectNode();
                out.put("ok", false);
                out.put("error", describe(cause));
                out.put("kind", cause.getClass().getSimpleName());
            }
            if (cmd != null && cmd.has("id")) {
                out.set("id", cmd.get("id"));
            }
            OUT.println(JSON.writeValueAsString(out));
            OUT.flush();
        }
        if (!closed) {
            store.close();
        }
        System.exit(0);
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    private static String describe(Throwable t) {
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    private static ObjectNode ok() {
        ObjectNode o = JSON.createObjectNode();
        o.put("ok", true);
        return o;
    }

    private static Optional<Long> expected(JsonNode cmd) {
        JsonNode v = cmd.get("expectedVersion");
        return v == null || v.isNull() ? Optional.empty() : Optional.of(v.asLong());
    }

    private static ObjectNode handle(JsonNode cmd) throws Exception {
        String path = cmd.path("path").asText();
        switch (cmd.get("cmd").asText()) {
            case "get": {
                Optional<GetResult> r = store.get(path).get();
                ObjectNode o = ok();
                o.put("found", r.isPresent());
                if (r.isPresent()) {
                    Stat s = r.get().getStat();
                    o.put("value", HEX.formatHex(r.get().getValue()));
                    o.put("version", s.getVersion());
                    o.put("ephemeral", s.isEphemeral());
                    o.put("createdBySelf", s.isCreatedBySelf());
                }
                return o;
            }
            case "put": {
                EnumSet<CreateOption> options = EnumSet.noneOf(CreateOption.class);
                if (cmd.path("ephemeral").asBoolean(false)) {
                    options.add(CreateOption.Ephemeral);
                }
                if (cmd.path("sequential").asBoolean(false)) {
                    options.add(CreateOption.Sequential);
                }
                byte[] value = HEX.parseHex(cmd.path("value").asText(""));
                Stat s = store.put(path, value, expected(cmd), options).get();
                ObjectNode o = ok();
                o.put("path", s.getPath());
                o.put("version", s.getVersion());
                return o;
            }
            case "delete":
                store.delete(path, expected(cmd)).get();
                return ok();
            case "exists": {
                ObjectNode o = ok();
                o.put("exists", store.exists(path).get());
                return o;
            }
            case "children": {
                List<String> children = store.getChildrenFromStore(path).get();
                ObjectNode o = ok();
                ArrayNode a = o.putArray("children");
                children.forEach(a::add);
                return o;
            }
            case "bench":
                return bench(cmd);
            default:
                throw new IllegalArgumentException("unknown command " + cmd.get("cmd"));
        }
    }

    private static ObjectNode bench(JsonNode cmd) throws Exception {
        String op = cmd.get("op").asText();
        List<String> keys = new ArrayList<>();
        cmd.get("keys").forEach(k -> keys.add(k.asText()));
        long iters = cmd.get("iters").asLong();
        int size = cmd.path("size").asInt(0);
        if (keys.isEmpty()) {
            throw new IllegalArgumentException("bench needs at least one key");
        }
        byte[] value = new byte[size];
        for (int i = 0; i < size; i++) {
            value[i] = (byte) ('a' + i % 26);
        }
        long[] versions = new long[keys.size()];
        if (op.equals("put")) {
            for (int i = 0; i < keys.size(); i++) {
                Optional<GetResult> r = store.get(keys.get(i)).get();
                if (r.isEmpty()) {
                    throw new IllegalArgumentException("bench key " + keys.get(i) + " does not exist");
                }
                versions[i] = r.get().getStat().getVersion();
            }
        } else if (!op.equals("get")) {
            throw new IllegalArgumentException("unknown bench op " + op);
        }
        List<CompletableFuture<Void>> lanes = new ArrayList<>();
        long start = System.nanoTime();
        for (int i = 0; i < keys.size(); i++) {
            long n = iters / keys.size() + (i < iters % keys.size() ? 1 : 0);
            lanes.add(lane(op, keys.get(i), value, versions, i, n));
        }
        CompletableFuture.allOf(lanes.toArray(new CompletableFuture[0])).get();
        long nanos = System.nanoTime() - start;
        ObjectNode o = ok();
        o.put("nanos", nanos);
        return o;
    }

    /** `left` operations on `key`, one after the other. */
    private static CompletableFuture<Void> lane(String op, String key, byte[] value, long[] versions, int lane,
                                                long left) {
        if (left <= 0) {
            return CompletableFuture.completedFuture(null);
        }
        CompletableFuture<Void> one;
        if (op.equals("get")) {
            one = store.get(key).thenAccept(r -> {
                if (r.isEmpty()) {
                    throw new IllegalStateException(key + " vanished");
                }
            });
        } else {
            one = store.put(key, value, Optional.of(versions[lane]), EnumSet.noneOf(CreateOption.class))
                    .thenAccept(s -> versions[lane] = s.getVersion());
        }
        return one.thenCompose(v -> lane(op, key, value, versions, lane, left - 1));
    }
}
