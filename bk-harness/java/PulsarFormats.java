/*
 * Judge of bkswitch's metadata bytes: Apache Pulsar's own generated classes
 * (managed-ledger's MLDataFormats, the broker's schema storage formats) decode
 * what bkswitch wrote and re-encode it, and build metadata for bkswitch to
 * decode. Run by bkswitch-bk-harness (`PulsarJudge`); reads one JSON command
 * per line on stdin, answers one JSON line each on stdout, until stdin ends:
 *
 *   {"cmd":"decode","kind":K,"data":<base64>}
 *       -> {"ok":true,"reencoded":<base64>,"identical":bool,"stamps":[...],"fields":{...}}
 *          parse with Pulsar's class for K, re-serialize; `stamps` are the values
 *          of the property `_pulsar.bookieClusterName` found through Pulsar's
 *          accessors (LedgerInfo.properties of each ledger, or the cursor's
 *          cursorProperties); for a schema locator, `fields.entries` lists
 *          every index entry as Pulsar reads it (version, ledgerId, entryId,
 *          hash), the latest first.
 *   {"cmd":"encode","kind":K,"stamp":S}
 *       -> {"ok":true,"data":<base64>}  a sample built with Pulsar's classes,
 *          stamped with S where the kind has a place for it.
 *   failures -> {"ok":false,"error":"..."}
 *
 * Kinds: managed-ledger (ManagedLedgerInfo), cursor (ManagedCursorInfo),
 * position (the cursor ledger's PositionInfo), schema-locator (SchemaLocator),
 * schema-entry (SchemaEntry).
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import org.apache.bookkeeper.mledger.proto.ManagedCursorInfo;
import org.apache.bookkeeper.mledger.proto.ManagedLedgerInfo;
import org.apache.bookkeeper.mledger.proto.PositionInfo;
import org.apache.pulsar.broker.service.schema.SchemaEntry;
import org.apache.pulsar.broker.service.schema.SchemaLocator;

public final class PulsarFormats {
    private static final String STAMP = "_pulsar.bookieClusterName";
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode out;
            try {
                out = handle(JSON.readTree(line));
            } catch (Throwable t) {
                out = JSON.createObjectNode();
                out.put("ok", false);
                out.put("error", t.getClass().getSimpleName() + ": " + t.getMessage());
            }
            System.out.println(JSON.writeValueAsString(out));
            System.out.flush();
        }
    }

    private static ObjectNode handle(JsonNode cmd) {
        String kind = cmd.get("kind").asText();
        switch (cmd.get("cmd").asText()) {
            case "decode":
                return decode(kind, Base64.getDecoder().decode(cmd.get("data").asText()));
            case "encode":
                return encode(kind, cmd.hasNonNull("stamp") ? cmd.get("stamp").asText() : null);
            default:
                throw new IllegalArgumentException("unknown command " + cmd.get("cmd"));
        }
    }

    private static ObjectNode indexEntry(org.apache.pulsar.broker.service.schema.IndexEntry e) {
        ObjectNode o = JSON.createObjectNode();
        o.put("version", e.getVersion());
        o.put("ledgerId", e.getPosition().getLedgerId());
        o.put("entryId", e.getPosition().getEntryId());
        o.put("hash", Base64.getEncoder().encodeToString(e.getHash()));
        return o;
    }

    private static ObjectNode decode(String kind, byte[] data) {
        ArrayNode stamps = JSON.createArrayNode();
        ObjectNode fields = JSON.createObjectNode();
        byte[] again;
        switch (kind) {
            case "managed-ledger": {
                ManagedLedgerInfo info = new ManagedLedgerInfo();
                info.parseFrom(data);
                for (ManagedLedgerInfo.LedgerInfo ledger : info.getLedgerInfosList()) {
                    ledger.getPropertiesList().stream()
                        .filter(p -> STAMP.equals(p.getKey()))
                        .forEach(p -> stamps.add(p.getValue()));
                }
                again = info.toByteArray();
                break;
            }
            case "cursor": {
                ManagedCursorInfo info = new ManagedCursorInfo();
                info.parseFrom(data);
                info.getCursorPropertiesList().stream()
                    .filter(p -> STAMP.equals(p.getName()))
                    .forEach(p -> stamps.add(p.getValue()));
                again = info.toByteArray();
                break;
            }
            case "position": {
                PositionInfo info = new PositionInfo();
                info.parseFrom(data);
                again = info.toByteArray();
                break;
            }
            case "schema-locator": {
                SchemaLocator info = new SchemaLocator();
                info.parseFrom(data);
                ArrayNode entries = JSON.createArrayNode();
                entries.add(indexEntry(info.getInfo()));
                for (int i = 0; i < info.getIndexsCount(); i++) {
                    entries.add(indexEntry(info.getIndexAt(i)));
                }
                fields.set("entries", entries);
                again = info.toByteArray();
                break;
            }
            case "schema-entry": {
                SchemaEntry info = new SchemaEntry();
                info.parseFrom(data);
                again = info.toByteArray();
                break;
            }
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
        ObjectNode out = JSON.createObjectNode();
        out.put("ok", true);
        out.put("reencoded", Base64.getEncoder().encodeToString(again));
        out.put("identical", Arrays.equals(again, data));
        out.set("stamps", stamps);
        out.set("fields", fields);
        return out;
    }

    private static ObjectNode encode(String kind, String stamp) {
        byte[] data;
        switch (kind) {
            case "managed-ledger": {
                ManagedLedgerInfo info = new ManagedLedgerInfo();
                ManagedLedgerInfo.LedgerInfo first = info.addLedgerInfo();
                first.setLedgerId(7).setEntries(100).setSize(102400).setTimestamp(1_700_000_000_000L);
                first.addProperty().setKey("application").setValue("pulsar");
                if (stamp != null) {
                    first.addProperty().setKey(STAMP).setValue(stamp);
                }
                ManagedLedgerInfo.LedgerInfo second = info.addLedgerInfo();
                second.setLedgerId((1L << 40) + 1);
                if (stamp != null) {
                    second.addProperty().setKey(STAMP).setValue(stamp);
                }
                info.addProperty().setKey("owner").setValue("broker-1");
                data = info.toByteArray();
                break;
            }
            case "cursor": {
                ManagedCursorInfo info = new ManagedCursorInfo();
                info.setCursorsLedgerId((1L << 32) + 5).setMarkDeleteLedgerId(7).setMarkDeleteEntryId(41);
                info.addIndividualDeletedMessage().setLowerEndpoint().setLedgerId(7).setEntryId(43);
                info.getIndividualDeletedMessageAt(0).setUpperEndpoint().setLedgerId(7).setEntryId(45);
                info.addProperty().setName("counter").setValue(3);
                info.addCursorProperty().setName("user").setValue("value");
                if (stamp != null) {
                    info.addCursorProperty().setName(STAMP).setValue(stamp);
                }
                data = info.toByteArray();
                break;
            }
            case "position": {
                PositionInfo info = new PositionInfo();
                info.setLedgerId(7).setEntryId(41);
                info.addProperty().setName("counter").setValue(3);
                data = info.toByteArray();
                break;
            }
            default:
                throw new IllegalArgumentException("cannot encode kind " + kind);
        }
        ObjectNode out = JSON.createObjectNode();
        out.put("ok", true);
        out.put("data", Base64.getEncoder().encodeToString(data));
        return out;
    }
}
